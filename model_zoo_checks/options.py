"""What the sweep and the benchmarks share: the dtype table, the device/dtype options, onnxruntime sessions."""

from __future__ import annotations

import argparse
from typing import Any

import torch

from fxpool.verifying import onnxruntime_session

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


def ort_sessions(paths: dict[str, str], provider: str = "CPUExecutionProvider") -> dict[str, Any]:
    """One onnxruntime session per named graph, all on ``provider``."""
    return {name: onnxruntime_session(path, [provider]) for name, path in paths.items()}
