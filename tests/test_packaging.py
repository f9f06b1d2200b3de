"""The wheel and the sdist, built as a user or an index would get them, and what each holds.

Built offline with ``python -m build --no-isolation`` (the venv's setuptools; nothing downloaded), once per
session into a temporary folder; ``twine check`` (make lint) checks the same metadata. The wheel holds the
``fxpool`` package alone; the sdist adds what its tests need (MANIFEST.in), which the slow test proves by
collecting the unpacked sdist's test suite.
"""

from __future__ import annotations

import email
import importlib.util
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _build_installed() -> bool:
    """Whether the ``build`` package is installed: a ``build/`` folder in the current one (what ``pip install .``
    leaves) is found as a namespace package with no origin, and is not it."""
    spec = importlib.util.find_spec("build")
    return spec is not None and spec.origin not in (None, "namespace")


pytestmark = pytest.mark.skipif(not _build_installed(), reason="needs the build package (the test extra has it)")


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("dist")
    run = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    assert "SetuptoolsDeprecationWarning" not in run.stdout + run.stderr, "the build warns of deprecated metadata"
    (wheel,) = out.glob("fxpool-*.whl")
    (sdist,) = out.glob("fxpool-*.tar.gz")
    return {"wheel": wheel, "sdist": sdist}


def test_the_wheel_holds_the_package_its_entry_point_and_license(dist: dict[str, Path]) -> None:
    names = zipfile.ZipFile(dist["wheel"]).namelist()
    tops = {name.split("/")[0] for name in names}
    assert tops == {"fxpool", next(t for t in tops if t.endswith(".dist-info"))}, tops
    package = {name.removeprefix("fxpool/") for name in names if name.startswith("fxpool/")}
    assert {"__init__.py", "__main__.py", "cli.py", "py.typed"} <= package
    assert {p.name for p in (ROOT / "fxpool").glob("*.py")} <= package  # every module of the package
    info = next(t for t in tops if t.endswith(".dist-info"))
    assert f"{info}/licenses/LICENSE" in names
    metadata = email.message_from_bytes(zipfile.ZipFile(dist["wheel"]).read(f"{info}/METADATA"))
    assert metadata["License-Expression"] == "MIT" and metadata["License-File"] == "LICENSE"
    assert set(metadata.get_all("Provides-Extra")) >= {"onnx", "zoo", "test", "dev", "docs"}
    assert not [url for url in metadata.get_all("Project-URL") or [] if "example" in url], "a placeholder address"
    entry_points = zipfile.ZipFile(dist["wheel"]).read(f"{info}/entry_points.txt").decode()
    assert "fxpool = fxpool.cli:main" in entry_points


def test_the_sdist_holds_what_its_tests_need(dist: dict[str, Path]) -> None:
    with tarfile.open(dist["sdist"]) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    for folder in ("fxpool", "tests", "model_zoo_checks", "docs"):
        on_disk = {
            str(path.relative_to(ROOT))
            for path in (ROOT / folder).rglob("*")
            if path.is_file() and "__pycache__" not in path.parts and path.suffix not in (".pyc", ".onnx")
        }
        missing = on_disk - names
        assert not missing, f"the sdist lacks {sorted(missing)[:10]}"
    assert {"pyproject.toml", "MANIFEST.in", "README.md", "LICENSE", "Makefile", "constraints.txt", "mkdocs.yml"} <= names
    assert not [name for name in names if "__pycache__" in name or name.endswith(".pyc")]


@pytest.mark.slow
def test_the_unpacked_sdists_test_suite_collects(dist: dict[str, Path], tmp_path: Path) -> None:
    with tarfile.open(dist["sdist"]) as archive:
        archive.extractall(tmp_path, filter="data")
    (root,) = tmp_path.iterdir()
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0 and " error" not in run.stdout.splitlines()[-1], run.stdout[-3000:] + run.stderr[-2000:]
