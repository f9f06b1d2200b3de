"""Output files written atomically: a failed or interrupted export never destroys or truncates a file.

The exporter writes into a staging folder beside the target (the same file system, so ``os.replace`` is atomic);
:meth:`Staging.commit` moves each file into place, companions such as ``NAME.onnx.data`` first and the graph last, or
:meth:`Staging.set_aside` moves a graph that failed its check to ``NAME.failed/``. The staging folder is removed on
the way out, whatever happens; one left by a killed process (``.NAME.fxpool-partial-PID-*``) is removed by the next
export to the same target."""

from __future__ import annotations

import glob
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .errors import OutputFileError

STAGING_MARK = ".fxpool-partial-"


@dataclass(frozen=True)
class WrittenFile:
    """A file an export wrote, and its size in bytes."""

    path: str
    size: int

    def __str__(self) -> str:
        return f"{self.path} ({human_size(self.size)})"


def human_size(size: int) -> str:
    """``531.2 MB``, ``4.0 kB``, ``12 B``: decimal units, as file managers show them."""
    value, unit = float(size), "B"
    for larger in ("kB", "MB", "GB"):
        if value < 1000:
            break
        value, unit = value / 1000, larger
    return f"{size} B" if unit == "B" else f"{value:.1f} {unit}"


def check_output_path(path: str | os.PathLike[str]) -> Path:
    """The absolute target, or `OutputFileError` for a path that cannot be an output file (checked before any work)."""
    target = Path(os.path.abspath(os.fspath(path)))
    if target.is_dir():
        raise OutputFileError(f"output {os.fspath(path)!r} is a folder; give the file to write, e.g. {target / 'model.onnx'}")
    if target.exists() and not target.is_file():
        raise OutputFileError(f"output {os.fspath(path)!r} exists and is not a regular file; give another path")
    if not target.parent.is_dir():
        what = "is not a folder" if target.parent.exists() else "does not exist"
        raise OutputFileError(f"output {os.fspath(path)!r}: the folder {str(target.parent)!r} {what}; create it first")
    return target


@dataclass(frozen=True)
class Staging:
    """Where an export writes before its files are moved into place."""

    target: Path
    folder: Path

    @property
    def path(self) -> str:
        """The graph's path inside the staging folder (its companions go beside it)."""
        return str(self.folder / self.target.name)

    def files(self) -> list[Path]:
        return sorted(p for p in self.folder.iterdir() if p.is_file())

    def commit(self) -> tuple[WrittenFile, ...]:
        """Move every staged file into the target's folder, the graph last; each file written, with its size."""
        staged = self.files()
        graph = self.folder / self.target.name
        if graph not in staged:
            raise OutputFileError(f"the exporter wrote no file for {str(self.target)!r}; nothing was moved into place")
        written = []
        for source in [p for p in staged if p != graph] + [graph]:
            destination = self.target.parent / source.name
            size = source.stat().st_size
            try:
                os.replace(source, destination)
            except OSError as error:
                raise OutputFileError(f"cannot move {source.name} into {str(self.target.parent)!r}: {error}") from error
            written.append(WrittenFile(str(destination), size))
        return tuple(written)

    def set_aside(self) -> str:
        """Move the staged files to the folder ``NAME.failed`` beside the target (replacing an earlier one); where, in words."""
        failed = self.target.with_name(self.target.name + ".failed")
        if failed.is_dir() and not failed.is_symlink():
            shutil.rmtree(failed)
        elif failed.exists() or failed.is_symlink():
            failed.unlink()
        names = ", ".join(p.name for p in self.files())
        os.replace(self.folder, failed)
        return f"{failed}{os.sep} ({names})"


@contextmanager
def staged_output(path: str | os.PathLike[str]) -> Iterator[Staging]:
    """A staging folder beside ``path``, removed on the way out whatever happened (committed files are gone from it)."""
    target = check_output_path(path)
    remove_stale_staging(target)
    try:
        folder = tempfile.mkdtemp(prefix=f".{target.name}{STAGING_MARK}{os.getpid()}-", dir=target.parent)
    except OSError as error:
        raise OutputFileError(f"output {os.fspath(path)!r}: cannot write in {str(target.parent)!r} ({error.strerror})") from error
    try:
        yield Staging(target, Path(folder))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def remove_stale_staging(target: Path) -> None:
    """Remove staging folders of ``target`` left by processes that no longer run."""
    prefix = f".{target.name}{STAGING_MARK}"
    for entry in target.parent.glob(f"{glob.escape(prefix)}*"):
        pid_text = entry.name[len(prefix) :].split("-", 1)[0]
        if entry.is_dir() and pid_text.isdigit() and not _alive(int(pid_text)):
            shutil.rmtree(entry, ignore_errors=True)


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True
