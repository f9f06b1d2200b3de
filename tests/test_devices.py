"""Devices and compilers: the model and example on CUDA, a converted model moved between devices, CUDA
graphs, torch.compile and AOTInductor, the three dtypes on real models, and the self-check under TF32.

CUDA tests are marked ``cuda`` (skipped without a GPU; ``make gpu-checks`` runs them); compiling on the
CPU takes minutes, so those are marked ``slow``. Tolerances, converted against original, relative to
the output's largest magnitude: float32 1e-4 (1e-3 where TF32 convolutions run: their own noise),
float16 1e-2, bfloat16 5e-2 (both models round every layer; only the pools differ).
"""

from __future__ import annotations

import pytest
import torch
import torchvision
from torch import nn

import fxpool
from fxpool import report_of

RELATIVE = {torch.float32: 1e-3, torch.float16: 1e-2, torch.bfloat16: 5e-2}
needs_cuda = pytest.mark.cuda


def relative_error(ours: torch.Tensor, theirs: torch.Tensor) -> float:
    return ((ours.float() - theirs.float()).abs().max() / theirs.float().abs().max().clamp_min(1e-30)).item()


def pyramid(bins: tuple[int, ...] = (1, 2, 3, 6)) -> nn.Module:
    """A PSPNet-style pyramid on a resnet18 trunk (the zoo's pspnet_resnet18)."""
    from model_zoo_checks.catalog import PyramidPoolingNet

    return PyramidPoolingNet(bins=bins).eval()


REAL_MODELS = {
    "vgg11": (lambda: torchvision.models.vgg11(weights=None).eval(), (2, 3, 160, 160)),  # 5 -> 7: window slices
    "resnet18": (lambda: torchvision.models.resnet18(weights=None).eval(), (2, 3, 160, 160)),
    "efficientnet_b0": (lambda: torchvision.models.efficientnet_b0(weights=None).eval(), (2, 3, 160, 160)),
    "pspnet_resnet18": (pyramid, (2, 3, 320, 320)),  # 40 -> 1, 2, 3, 6
}


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name", list(REAL_MODELS))
def test_real_models_convert_on_cuda_in_three_dtypes(name: str, dtype: torch.dtype) -> None:
    build, shape = REAL_MODELS[name]
    torch.manual_seed(0)
    model = build().to("cuda", dtype)
    x = torch.randn(shape, device="cuda", dtype=dtype)
    converted = fxpool.convert(model, x)
    report = report_of(converted)
    assert report.stands_alone and report.check is not None and report.check.status == "passed", str(report)
    with torch.no_grad():
        assert relative_error(converted(x), model(x)) <= RELATIVE[dtype]


@needs_cuda
def test_tf32_convolutions_do_not_undo_the_conversion() -> None:
    # The case: smp's PSPNet in float32 on an H200 came back unconverted, its check "skipped".
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = True
    try:
        torch.manual_seed(0)
        model = pyramid().cuda()
        x = torch.randn(8, 3, 480, 480, device="cuda")
        report = report_of(fxpool.convert(model, x, strict=True))
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved
    assert len(report.converted) == 4 and report.check is not None and report.check.status == "passed", str(report)


@needs_cuda
def test_a_converted_model_moves_between_devices() -> None:
    model, x = pyramid(), torch.randn(1, 3, 160, 160)
    on_cpu = fxpool.convert(model, x)
    moved = on_cpu.cuda()
    with torch.no_grad():
        assert relative_error(moved(x.cuda()).cpu(), model(x)) <= 1e-4
    back = fxpool.convert(model.cuda(), x.cuda()).cpu()
    with torch.no_grad():
        assert relative_error(back(x), model.cpu()(x)) <= 1e-4


@needs_cuda
def test_a_converted_model_is_captured_and_replayed_as_a_cuda_graph() -> None:
    model = torchvision.models.vgg11(weights=None).eval().cuda()
    static = torch.randn(2, 3, 160, 160, device="cuda")
    converted = fxpool.convert(model, static)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.no_grad():
        for _ in range(3):
            converted(static)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), torch.no_grad():
        out = converted(static)
    fresh = torch.randn_like(static)
    static.copy_(fresh)
    graph.replay()
    with torch.no_grad():
        assert relative_error(out, model(fresh)) <= 1e-4


def _compile_check(device: str) -> None:
    model = pyramid().to(device)
    x = torch.randn(1, 3, 160, 160, device=device)
    converted = fxpool.convert(model, x)
    compiled = torch.compile(converted, fullgraph=True)
    with torch.no_grad():
        assert relative_error(compiled(x), model(x)) <= RELATIVE[torch.float32]


def _aot_inductor_check(device: str, tmp_path) -> None:
    model = pyramid().to(device)
    x = torch.randn(1, 3, 160, 160, device=device)
    converted = fxpool.convert(model, x)
    program = torch.export.export(converted, (x,))
    assert not [n for n in program.graph.nodes if n.op == "call_function" and "adaptive" in str(n.target)]
    package = torch._inductor.aoti_compile_and_package(program, package_path=str(tmp_path / f"pyramid-{device}.pt2"))
    loaded = torch._inductor.aoti_load_package(package)
    with torch.no_grad():
        assert relative_error(loaded(x), model(x)) <= RELATIVE[torch.float32]


@needs_cuda
def test_torch_compile_of_a_converted_model_on_cuda() -> None:
    _compile_check("cuda")


@needs_cuda
def test_aot_inductor_package_of_a_converted_model_on_cuda(tmp_path) -> None:
    _aot_inductor_check("cuda", tmp_path)


@pytest.mark.slow
def test_torch_compile_of_a_converted_model_on_cpu() -> None:
    _compile_check("cpu")


@pytest.mark.slow
def test_aot_inductor_package_of_a_converted_model_on_cpu(tmp_path) -> None:
    _aot_inductor_check("cpu", tmp_path)


@needs_cuda
def test_the_hook_exports_a_cuda_model(tmp_path) -> None:
    from fxpool.verifying import run_onnxruntime

    model = pyramid().cuda()
    x = torch.randn(1, 3, 160, 160, device="cuda")
    with fxpool.onnx_export_hook(strict=True):
        torch.onnx.export(model, (x,), str(tmp_path / "hooked.onnx"), dynamo=True)
    (out,) = run_onnxruntime(str(tmp_path / "hooked.onnx"), (x,))
    with torch.no_grad():
        assert relative_error(torch.from_numpy(out), model(x).cpu()) <= 1e-4
