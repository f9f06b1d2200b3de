"""What the sweep and the benchmarks share: the dtype table, the device/dtype options, onnxruntime sessions,
and the words that say what a run measured on."""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
from pathlib import Path
from typing import Any

import torch

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def add_device_options(parser: argparse.ArgumentParser, device_help: str) -> None:
    """``--device`` and ``--dtypes`` (default: float32 on the CPU, all three on CUDA)."""
    parser.add_argument("--device", default="cpu", help=device_help)
    parser.add_argument(
        "--dtypes", nargs="*", choices=list(DTYPES), default=None, help="default: float32 on cpu, all three on cuda"
    )


def device_and_dtypes(parser: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[str, tuple[str, ...]]:
    """The device and dtypes the options ask for; a usage error where CUDA is asked for and absent."""
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is available")
    return args.device, tuple(args.dtypes or (["float32"] if args.device == "cpu" else list(DTYPES)))


def ort_provider(device: str) -> str:
    """CUDA when the run is on the GPU and onnxruntime-gpu is installed, otherwise CPU."""
    import onnxruntime

    if device.startswith("cuda") and "CUDAExecutionProvider" in onnxruntime.get_available_providers():
        return "CUDAExecutionProvider"
    return "CPUExecutionProvider"


def ort_sessions(paths: dict[str, str], provider: str = "CPUExecutionProvider", threads: int = 0) -> dict[str, Any]:
    """One onnxruntime session per named graph, all on ``provider``, for timing side by side
    (``threads`` intra-op threads; 0: onnxruntime's default, one per core).

    The sessions' worker threads do not spin-wait after a run: spinning threads of one session take
    the cores from the next session's run when the two alternate, which timed two identical
    AveragePool graphs 1.6x apart (64x64 -> 2x2, C=512, 2 cores) and sent a ratio either way.
    """
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.intra_op_num_threads = threads
    return {name: onnxruntime.InferenceSession(path, options, providers=[provider]) for name, path in paths.items()}


def run_facts() -> dict[str, Any]:
    """What a report says of its run beyond the numbers: the day and the CPU (``AMD EPYC, 2 cores``)."""
    cpuinfo = Path("/proc/cpuinfo")
    model = re.search(r"^model name\s*:\s*(.+)$", cpuinfo.read_text(), re.MULTILINE) if cpuinfo.is_file() else None
    name = (model.group(1) if model else platform.processor()).strip() or platform.machine()
    return {"date": datetime.date.today().isoformat(), "cpu": f"{name}, {os.cpu_count()} cores"}


def without_machine_paths(text: str) -> str:
    """``text`` with the absolute paths of this machine cut to what a reader can place: an installed
    package's file from its package on (``torch/nn/modules/pooling.py``), anything else to its name."""
    text = re.sub(r"(?:[A-Za-z]:)?[/\\][^\s:'\"]*?[/\\](?:site|dist)-packages[/\\]", "", text)
    return re.sub(r"(?<![\w./:])/(?:[^\s/:'\"]+/)+([^\s/:'\"]+)", r"\1", text)


def draw_figures(kind: str, results: dict[str, Any], report: Path, out: Any = None) -> None:
    """The figures of a report (:mod:`model_zoo_checks.figures`) beside it, SVG and PNG; said on ``out``
    (default stdout). Without matplotlib (an optional dependency) it says so and draws nothing."""
    try:
        from .figures import write_figures
    except ImportError as error:
        print(f"no figures: {error} (matplotlib is in the zoo and test extras)", file=out)
        return
    for path in write_figures(kind, results, report.parent, report.stem):
        print(f"wrote {path}", file=out)
