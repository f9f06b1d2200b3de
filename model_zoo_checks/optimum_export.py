"""Hugging Face's ONNX exporter (optimum-onnx) with dynamic axes, through fxpool's hook, on the
segmentation heads that hold pyramid pools.

Each model is built from a small config (random weights, nothing downloaded), exported by
``optimum.exporters.onnx.onnx_export_from_model`` inside ``fxpool.onnx_export_hook(dynamic=True)`` at
one size (optimum's graph has dynamic batch, height and width axes), then run in onnxruntime at sizes it
was not exported at, against the PyTorch model:

- ``upernet-convnext``, ``upernet-swin``: ``UperNetForSemanticSegmentation`` (its pyramid pools to 1, 2,
  3 and 6) over a ConvNeXt and a Swin backbone; fully convolutional, so any size a multiple of 32 runs;
- ``beit``, ``data2vec-vision``: ``BeitForSemanticSegmentation`` and
  ``Data2VecVisionForSemanticSegmentation`` (the same UPerNet head). Their forward reshapes the patch
  tokens to ``config.image_size // config.patch_size`` squared (transformers 4.57), so PyTorch itself runs
  them only where the patch count equals the config's: at 256 with other batch sizes, and at 128x512
  and 512x128 (the tokens read as a 16x16 grid, as in PyTorch). At 320, 384 and 448 both PyTorch and
  the ONNX graph refuse, with the same error: the check records that neither answers.

optimum-onnx 0.1.0 registers no ``semantic-segmentation`` ONNX config for these model types; the config a
user writes is the vision config with that task (:func:`register_segmentation_task`, one decorator call).
Without the hook, the stock TorchScript exporter refuses UperNet's pools ("adaptive_avg_pool2d, input size
not accessible"); with the hook but without ``dynamic=True``, fxpool refuses the dynamic axes
(``SpatialSizeError``).

optimum-onnx 0.1.0 needs transformers < 4.58, so this runs in a venv of its own (``make optimum``:
``.venv-optimum``). ``python -m model_zoo_checks.optimum_export`` writes ``REPORT/optimum.json`` and
``REPORT/optimum.md``; ``tests/test_optimum_export.py`` runs the same checks.
"""

from __future__ import annotations

import argparse
import json
import re
import time
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

import fxpool

from .capture import captured, console
from .options import run_facts, without_machine_paths

# |onnxruntime - PyTorch| allowed elementwise, as elsewhere: atol 1e-5 times the output's largest magnitude (at
# least 1) plus rtol 1e-4 times the expected value.
RTOL = 1e-4
ATOL = 1e-5

# Ops that would mean the stock exporter's form of a pool, or a fallback, where fxpool's should be.
FORBIDDEN_OPS = ("GatherND", "ScatterND", "Loop", "If", "ATen", "AdaptiveAvgPool", "AdaptiveMaxPool", "MaxRoiPool")

INSTALL = "pip install optimum-onnx==0.1.0 'transformers<4.58' onnxruntime (make .venv-optimum/.installed)"


def missing() -> str | None:
    """None if optimum's ONNX exporter imports here, else why not and the line that installs it."""
    try:
        import onnxruntime  # noqa: F401
        from optimum.exporters.onnx import onnx_export_from_model  # noqa: F401
    except Exception as error:  # ImportError, or a transformers optimum-onnx does not support
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        return f"optimum-onnx is not usable here ({type(error).__name__}: {without_machine_paths(first)[:200]}): {INSTALL}"
    return None


def _upernet(backbone: str) -> nn.Module:
    from transformers import ConvNextConfig, SwinConfig, UperNetConfig, UperNetForSemanticSegmentation

    stages = ["stage1", "stage2", "stage3", "stage4"]
    if backbone == "convnext":
        config = ConvNextConfig(depths=[1, 1, 1, 1], hidden_sizes=[16, 32, 64, 128], out_features=stages)
    else:  # window 2: every stage of a multiple of 32 tiles into windows, so Swin pads nothing
        config = SwinConfig(embed_dim=16, depths=[1, 1, 1, 1], num_heads=[1, 1, 2, 2], window_size=2, out_features=stages)
    head = UperNetConfig(backbone_config=config, hidden_size=32, auxiliary_channels=16, num_labels=5)
    return UperNetForSemanticSegmentation(head)


def _beit_like(kind: str) -> nn.Module:
    import transformers

    config_class, model_class = {
        "beit": (transformers.BeitConfig, transformers.BeitForSemanticSegmentation),
        "data2vec-vision": (transformers.Data2VecVisionConfig, transformers.Data2VecVisionForSemanticSegmentation),
    }[kind]
    config = config_class(
        image_size=256,
        patch_size=16,
        hidden_size=64,
        num_hidden_layers=4,
        num_attention_heads=2,
        intermediate_size=128,
        out_indices=[0, 1, 2, 3],
        auxiliary_channels=16,
        num_labels=5,
    )
    return model_class(config)


# the sizes (batch, height, width) each model is checked at, beside the export's own
FIXED_GRID = [(3, 256, 256), (1, 128, 512), (1, 512, 128)]  # BEiT-like: the patch count of the config
REFUSED = [(1, 320, 320), (1, 384, 384), (1, 448, 448)]  # ... and where PyTorch itself refuses
ANY_SIZE = [(1, 320, 320), (2, 384, 384), (1, 448, 320)]

# name: (builder, exported at (batch, height, width), sizes checked, what it shows)
MODELS: dict[str, tuple[Callable[[], nn.Module], tuple[int, int, int], list[tuple[int, int, int]], str]] = {
    "upernet-convnext": (lambda: _upernet("convnext"), (2, 256, 256), ANY_SIZE, "UperNet pyramid 1, 2, 3, 6 over ConvNeXt"),
    "upernet-swin": (lambda: _upernet("swin"), (2, 256, 256), ANY_SIZE, "UperNet pyramid 1, 2, 3, 6 over Swin"),
    "beit": (lambda: _beit_like("beit"), (2, 256, 256), FIXED_GRID + REFUSED, "BEiT's UPerNet head, patch grid of the config"),
    "data2vec-vision": (
        lambda: _beit_like("data2vec-vision"),
        (2, 256, 256),
        FIXED_GRID + REFUSED,
        "Data2Vec-vision's UPerNet head, patch grid of the config",
    ),
}


def register_segmentation_task(model_type: str) -> None:
    """What a user writes for a model type optimum-onnx knows no ``semantic-segmentation`` config for: the
    vision config (pixel values in; logits with dynamic batch, height and width out) under that task."""
    from optimum.exporters.onnx.model_configs import ViTOnnxConfig
    from optimum.exporters.tasks import TasksManager

    class SegmentationOnnxConfig(ViTOnnxConfig):
        pass

    TasksManager.create_register("onnx")(model_type, "semantic-segmentation")(SegmentationOnnxConfig)


def export(model: nn.Module, directory: Path, batch: int, height: int, width: int) -> Path:
    """optimum's export of ``model`` with fxpool's hook around it: the one line a user adds."""
    from optimum.exporters.onnx import onnx_export_from_model

    register_segmentation_task(model.config.model_type)
    with fxpool.onnx_export_hook(dynamic=True):
        onnx_export_from_model(model, directory, task="semantic-segmentation", batch_size=batch, height=height, width=width)
    return directory / "model.onnx"


@dataclass(frozen=True)
class SizeCheck:
    """The exported graph at one input size, against PyTorch."""

    size: tuple[int, int, int]
    max_error: float | None = None
    scale: float | None = None  # the expected output's largest magnitude
    within: bool | None = None  # every element within the tolerance
    torch_refused: str | None = None  # PyTorch's own error at this size, one line
    onnx_refused: str | None = None  # onnxruntime's, one line

    @property
    def exact(self) -> bool | None:
        """Within the bound; None where PyTorch refuses the size (then the graph must refuse it too)."""
        if self.torch_refused is not None:
            return None
        return bool(self.within)

    @property
    def agrees(self) -> bool:
        """Exact where PyTorch answers; refused by both where PyTorch refuses: never a silent answer."""
        if self.torch_refused is not None:
            return self.onnx_refused is not None
        return bool(self.exact)


@dataclass(frozen=True)
class OptimumRow:
    model: str
    exported_at: tuple[int, int, int]
    pools: int = 0  # adaptive pools fxpool's dynamic conversion replaced
    ops: dict[str, int] = field(default_factory=dict)
    dynamic_axes: dict[str, list[str | int]] = field(default_factory=dict)
    checks: tuple[SizeCheck, ...] = ()
    reason: str | None = None  # why the export failed, one line
    seconds: float = 0.0

    @property
    def forbidden_ops(self) -> list[str]:
        return sorted(op for op in self.ops if any(f in op for f in FORBIDDEN_OPS))

    @property
    def passed(self) -> bool:
        return self.reason is None and not self.forbidden_ops and bool(self.checks) and all(c.agrees for c in self.checks)


def _first_line(error: BaseException) -> str:
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(error)).strip().splitlines()
    return without_machine_paths(f"{type(error).__name__}: {text[0][:240] if text else ''}")


def check_size(session: Any, model: nn.Module, size: tuple[int, int, int]) -> SizeCheck:
    x = torch.randn(size[0], 3, size[1], size[2])
    try:
        with torch.no_grad():
            expected = model(pixel_values=x).logits
    except Exception as error:
        expected, torch_refused = None, _first_line(error)
    try:
        output = torch.from_numpy(session.run(None, {"pixel_values": x.numpy()})[0])
    except Exception as error:
        return SizeCheck(size, torch_refused=torch_refused if expected is None else None, onnx_refused=_first_line(error))
    if expected is None:
        return SizeCheck(size, torch_refused=torch_refused)
    scale = expected.abs().max().item()
    if output.shape != expected.shape:
        return SizeCheck(size, max_error=float("inf"), scale=scale, within=False)
    difference = (output - expected).abs()
    within = bool((difference <= ATOL * max(1.0, scale) + RTOL * expected.abs()).all())
    return SizeCheck(size, max_error=difference.max().item(), scale=scale, within=within)


def check(name: str, workdir: Path) -> OptimumRow:
    """Export one model through optimum with the hook, then run the graph at every size of its row."""
    import onnx
    import onnxruntime

    builder, exported_at, sizes, _ = MODELS[name]
    torch.manual_seed(0)
    model = builder().eval()
    batch, height, width = exported_at
    example = torch.randn(batch, 3, height, width)
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tracer's warnings on the models' shape arithmetic
        try:
            path = export(model, workdir / name, batch, height, width)
        except Exception as error:
            return OptimumRow(name, exported_at, reason=_first_line(error), seconds=time.perf_counter() - start)
        pools = len(fxpool.report_of(fxpool.convert(model, example, dynamic=True)).converted)
    seconds = time.perf_counter() - start
    graph = onnx.load(str(path))
    ops = Counter(node.op_type for node in graph.graph.node if node.op_type != "Constant")
    axes = {i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim] for i in graph.graph.input}
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    checks = tuple(check_size(session, model, size) for size in [exported_at, *sizes])
    return OptimumRow(name, exported_at, pools, dict(ops), axes, checks, seconds=seconds)


def _check_cell(c: SizeCheck) -> str:
    size = f"{c.size[0]}x{c.size[1]}x{c.size[2]}"
    if c.torch_refused is not None:
        return f"{size}: both refuse" if c.onnx_refused else f"{size}: PyTorch refuses, the graph ANSWERS"
    if c.onnx_refused is not None:
        return f"{size}: graph fails (`{c.onnx_refused}`)"
    return f"{size}: {c.max_error:.1e} ({'exact' if c.exact else 'OFF'})"


def markdown(rows: Sequence[OptimumRow]) -> str:
    lines = ["| model | pools | graph | sizes (batch x H x W): max error |", "|---|---|---|---|"]
    for row in rows:
        if row.reason:
            lines.append(f"| {row.model} | | export fails: `{row.reason}` | |")
            continue
        notable = ", ".join(f"{op} x{row.ops[op]}" for op in ("Range", "Where", "ReduceSum", "ReduceMean") if op in row.ops)
        forbidden = f"; forbidden: {', '.join(row.forbidden_ops)}" if row.forbidden_ops else "; no GatherND, Loop, If"
        graph = f"{sum(row.ops.values())} ops ({notable}){forbidden}"
        lines.append(f"| {row.model} | {row.pools} | {graph} | {'; '.join(_check_cell(c) for c in row.checks)} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m model_zoo_checks.optimum_export", description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", choices=list(MODELS), default=list(MODELS))
    parser.add_argument("--report", default="reports/optimum")
    args = parser.parse_args(argv)
    report = Path(args.report)
    out = console()
    why_not = missing()
    if why_not:
        print(why_not, file=out)
        return 2
    from importlib.metadata import version

    rows = []
    for name in args.models:
        with captured(report / "logs" / f"{name}.log"):
            row = check(name, report / "onnx")
        rows.append(row)
        verdict = "pass" if row.passed else "FAIL"
        print(f"{name:18s} {verdict}: " + (row.reason or "; ".join(_check_cell(c) for c in row.checks)), file=out, flush=True)
    results = {
        "torch": torch.__version__,
        "transformers": version("transformers"),
        "optimum-onnx": version("optimum-onnx"),
        **run_facts(),
        "rows": [{**asdict(r), "passed": r.passed} for r in rows],
    }
    (report / "optimum.json").write_text(json.dumps(results, indent=2))
    (report / "optimum.md").write_text(markdown(rows))
    failed = [r.model for r in rows if not r.passed]
    print(f"\n{len(rows) - len(failed)} of {len(rows)} models pass; report in {report}", file=out, flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
