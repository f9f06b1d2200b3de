"""One step outside the example: what a converted model does where the conversion did not look.

Non-finite values (compared position by position: NaN where PyTorch has NaN, the same infinities, the
finite values within float rounding), traced and exported graphs run at another size (exact or an
error that names the pool), an output size set at run time, autocast, and the tools users run on a
converted model (``torch.jit.script``/``trace``, ``quantize_fx``, ``vmap``, ``functional_call``).

Tolerances: float32 rtol=atol=1e-5 (onnxruntime sums in its own order), float64 rtol=atol=1e-12; max
pools bit for bit.
"""

from __future__ import annotations

import io
import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import fxpool
from fxpool import planning
from fxpool.replacements import ExactAdaptivePool
from fxpool.sizechecks import traced_forms

POOLS = {
    (family, dims): getattr(nn, f"Adaptive{family.capitalize()}Pool{dims}d") for family in ("avg", "max") for dims in (1, 2, 3)
}


def assert_same_positions(ours: torch.Tensor, theirs: torch.Tensor, exact: bool = False) -> None:
    """NaN exactly where ``theirs`` has NaN, the same infinities, finite values within rounding."""
    assert ours.shape == theirs.shape and ours.dtype == theirs.dtype
    assert torch.equal(torch.isnan(ours), torch.isnan(theirs)), (torch.isnan(ours).sum(), torch.isnan(theirs).sum())
    assert torch.equal(torch.isposinf(ours), torch.isposinf(theirs)) and torch.equal(torch.isneginf(ours), torch.isneginf(theirs))
    finite = torch.isfinite(theirs)
    tolerance = dict(rtol=0, atol=0) if exact else dict(rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ours[finite], theirs[finite], **tolerance)


def with_non_finite(x: torch.Tensor, positions: list[int], values: list[float]) -> torch.Tensor:
    x = x.clone()
    flat = x.view(-1)
    for position, value in zip(positions, values):
        flat[position % flat.numel()] = value
    return x


@st.composite
def non_finite_cases(draw):
    family = draw(st.sampled_from(["avg", "max"]))
    dims = draw(st.integers(1, 3))
    limit = 14 if dims < 3 else 7
    in_sizes = tuple(draw(st.integers(1, limit)) for _ in range(dims))
    out_sizes = tuple(draw(st.integers(1, limit + 4)) for _ in range(dims))
    count = draw(st.integers(1, 4))
    positions = draw(st.lists(st.integers(0, 10**6), min_size=count, max_size=count))
    values = draw(st.lists(st.sampled_from([float("nan"), float("inf"), float("-inf")]), min_size=count, max_size=count))
    form = draw(st.sampled_from(list(planning.AVERAGE_FORM_LIMITS)))
    return family, in_sizes, out_sizes, positions, values, form


def test_the_issues_nan_stays_in_its_windows() -> None:
    pool = nn.AdaptiveAvgPool2d((5, 7))
    converted = fxpool.convert(pool, torch.randn(1, 2, 13, 11))
    x = torch.randn(1, 2, 13, 11)
    x.view(-1)[3] = float("nan")
    assert torch.isnan(converted(x)).sum() == torch.isnan(pool(x)).sum() == 2
    with traced_forms():
        assert_same_positions(converted(x), pool(x))
    x.view(-1)[3] = float("inf")
    with traced_forms():
        assert_same_positions(converted(x), pool(x))


@settings(max_examples=300, deadline=None)
@given(non_finite_cases())
def test_non_finite_values_stay_in_their_windows_in_every_form(case) -> None:
    family, in_sizes, out_sizes, positions, values, form = case
    dims = len(in_sizes)
    x = with_non_finite(torch.randn(2, 3, *in_sizes, dtype=torch.float64), positions, values)
    native = POOLS[family, dims](out_sizes)
    with planning.forced_form(form):
        plan = planning.choose_plan(family, in_sizes, out_sizes)  # type: ignore[arg-type]
    module = ExactAdaptivePool(plan, "pool", torch.float64)
    expected = native(x)
    assert_same_positions(module(x), expected, exact=family == "max")  # eager
    with traced_forms():
        assert_same_positions(module(x), expected, exact=family == "max")  # what tracers see
    if plan.onnx_steps:
        assert_same_positions(module.onnx_form(x), expected, exact=family == "max")  # what ONNX export sees
    dynamic = fxpool.convert(native, x, dynamic=True)
    assert_same_positions(dynamic(x), expected, exact=family == "max")


def test_a_nan_in_the_example_does_not_stop_the_conversion() -> None:
    x = torch.randn(1, 2, 13, 11)
    x.view(-1)[7] = float("nan")
    for pool in (nn.AdaptiveAvgPool2d((5, 7)), nn.AdaptiveMaxPool2d((5, 7)), nn.AdaptiveAvgPool2d((64, 6))):
        converted = fxpool.convert(pool, x, strict=True)
        assert_same_positions(converted(x), pool(x))


ONNX_CASES = [  # (family, input shape, output size): one per exported form
    ("avg", (1, 3, 13, 11), (5, 7)),  # window sums (a small plane)
    ("avg", (1, 3, 64, 64), (6, 40)),  # slices, sliding (a large plane)
    ("avg", (1, 3, 1000, 8), (150, 8)),  # gathered windows
    ("avg", (1, 3, 4, 5), (8, 10)),  # nearest upsampling
    ("avg", (1, 2, 5, 6, 7), (3, 4, 5)),  # 3d
    ("max", (1, 3, 13, 11), (5, 7)),  # window maxima
    ("max", (1, 3, 4, 8), (6, 16)),  # window maxima, upsampling
]


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
@pytest.mark.parametrize("family,shape,size", ONNX_CASES)
def test_non_finite_values_stay_in_their_windows_in_onnxruntime(family, shape, size, dynamo: bool, dynamic: bool, tmp_path) -> None:
    from fxpool.verifying import run_onnxruntime

    pool = POOLS[family, len(size)](size)
    converted = fxpool.convert(pool, torch.randn(shape), dynamic=dynamic)
    path = str(tmp_path / "p.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(converted, (torch.randn(shape),), path, dynamo=dynamo)
    generator = torch.Generator().manual_seed(1)
    for values in ([float("nan")], [float("inf")], [float("-inf")], [float("inf"), float("-inf")], [float("nan"), float("inf")]):
        positions = torch.randint(0, 10**6, (len(values),), generator=generator).tolist()
        x = with_non_finite(torch.randn(shape, generator=generator), positions, values)
        (out,) = run_onnxruntime(path, (x,))
        assert_same_positions(torch.from_numpy(out), pool(x), exact=family == "max")


@pytest.mark.parametrize("family", ["avg", "max"])
def test_a_graph_traced_at_one_size_refuses_another(family: str) -> None:
    pool = POOLS[family, 2]((5, 7))
    converted = fxpool.convert(pool, torch.randn(1, 2, 13, 11))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        traced = torch.jit.trace(converted, (torch.randn(1, 2, 13, 11),))
    x = torch.randn(3, 2, 13, 11)  # another batch: fine
    torch.testing.assert_close(traced(x), pool(x), rtol=1e-6, atol=1e-6)
    with pytest.raises(Exception, match=r"'<root>'.*traced for spatial size \(13, 11\).*\[1, 2, 13, 13\].*dynamic=True"):
        traced(torch.randn(1, 2, 13, 13))


def test_the_issues_uniform_pool_traced_at_12_refuses_16() -> None:
    converted = fxpool.convert(nn.AdaptiveAvgPool2d(4), torch.randn(1, 2, 12, 12))
    traced = torch.jit.trace(converted, (torch.randn(1, 2, 12, 12),))
    with pytest.raises(Exception, match=r"traced for spatial size \(12, 12\)"):
        traced(torch.randn(1, 2, 16, 16))


def test_a_size_agnostic_replacement_traces_for_every_size() -> None:
    pool = nn.AdaptiveAvgPool2d((1, None))
    traced = torch.jit.trace(fxpool.convert(pool, torch.randn(1, 2, 13, 11)), (torch.randn(1, 2, 13, 11),))
    x = torch.randn(2, 2, 9, 17)
    torch.testing.assert_close(traced(x), pool(x), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("family", ["avg", "max"])
def test_an_onnx_graph_with_dynamic_spatial_axes_refuses_another_size(family: str, tmp_path) -> None:
    import onnxruntime

    pool = POOLS[family, 2]((5, 7))
    converted = fxpool.convert(pool, torch.randn(1, 2, 13, 11))
    path = str(tmp_path / "p.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # dynamic spatial axes: refused at export, without fxpool's hook too (13x11 -> 11x13 keeps the count)
        with pytest.raises(fxpool.SpatialSizeError, match="dynamic=True"):
            torch.onnx.export(
                converted, (torch.randn(1, 2, 13, 11),), path, dynamo=False, input_names=["x"], dynamic_axes={"x": {2: "h", 3: "w"}}
            )
        torch.onnx.export(
            converted, (torch.randn(1, 2, 13, 11),), path, dynamo=False, input_names=["x"], dynamic_axes={"x": {0: "b"}}
        )
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    x = torch.randn(4, 2, 13, 11)
    torch.testing.assert_close(torch.from_numpy(session.run(None, {"x": x.numpy()})[0]), pool(x), rtol=1e-5, atol=1e-5)
    for other in ((1, 2, 13, 13), (1, 2, 12, 11), (1, 2, 11, 13)):
        with pytest.raises(Exception, match="dimensions"):
            session.run(None, {"x": torch.randn(other).numpy()})


class SizedByArgument(nn.Module):
    """Sets its pool's output size from an argument before each call, as some heads do."""

    def __init__(self, pool: nn.Module) -> None:
        super().__init__()
        self.pool = pool

    def forward(self, x: torch.Tensor, k: int = 3) -> torch.Tensor:
        self.pool.output_size = (k, k)
        return self.pool(x)


@pytest.mark.parametrize("family", ["avg", "max"])
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_an_output_size_set_at_run_time_is_followed(family: str, dynamic: bool) -> None:
    model = SizedByArgument(POOLS[family, 2](3))
    x = torch.randn(1, 2, 13, 13)
    converted = fxpool.convert(model, x, dynamic=dynamic)
    assert isinstance(
        converted.pool, (ExactAdaptivePool, fxpool.dynamic.DynamicAdaptiveAvgPool, fxpool.dynamic.DynamicAdaptiveMaxPool)
    )
    for k in (5, 3, 6, 13):
        torch.testing.assert_close(converted(x, k), model(x, k), rtol=1e-6, atol=1e-6)
    converted.pool.output_size = 4  # set from outside, after the conversion
    torch.testing.assert_close(converted.pool(x), POOLS[family, 2](4)(x), rtol=1e-6, atol=1e-6)
    assert model.pool.output_size == (13, 13)  # the caller's module only ever saw its own calls


def test_an_output_size_that_is_not_one_is_refused_by_name() -> None:
    converted = fxpool.convert(SizedByArgument(nn.AdaptiveAvgPool2d(3)), torch.randn(1, 2, 13, 13))
    with pytest.raises(fxpool.PoolCallError, match="'pool'.*output_size"):
        converted.pool.output_size = (0, 2)


@pytest.mark.parametrize("dims", [1, 2, 3])
@pytest.mark.parametrize("family", ["avg", "max"])
def test_cpu_autocast_keeps_the_native_pools_dtype_policy(family: str, dims: int) -> None:
    """CPU autocast runs 3d pools in float32 (they are on its float32 list) and leaves 1d/2d pools to the input's dtype:
    after a bfloat16 convolution the original gives float32 (3d) or bfloat16 (1d, 2d), and so must the conversion."""
    conv = {1: nn.Conv1d, 2: nn.Conv2d, 3: nn.Conv3d}[dims](2, 4, 1)
    model = nn.Sequential(conv, POOLS[family, dims]((3, 4, 5)[:dims])).eval()
    x = torch.randn((1, 2) + (7, 9, 11)[:dims])
    converted = fxpool.convert(model, x, strict=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = model(x)
        assert converted(x).dtype == expected.dtype == (torch.float32 if dims == 3 else torch.bfloat16)
        torch.testing.assert_close(converted(x), expected, rtol=0, atol=0)


@pytest.mark.parametrize("family", ["avg", "max"])
def test_autocast_keeps_the_dtype_and_values_of_the_native_pool(family: str) -> None:
    pool = POOLS[family, 2]((5, 7))
    model = nn.Sequential(nn.Conv2d(2, 2, 1), pool)
    x = torch.randn(1, 2, 13, 11)
    converted = fxpool.convert(model, x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = pool(x)  # the pool alone: float32 in, float32 out (not on autocast's lists)
        assert converted[1](x).dtype == expected.dtype == torch.float32
        torch.testing.assert_close(converted[1](x), expected, rtol=1e-6, atol=1e-6)
        with traced_forms():
            torch.testing.assert_close(converted[1](x), expected, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(converted(x), model(x), rtol=0, atol=0)  # the same bfloat16 convolution, then the pool
    dynamic = fxpool.convert(pool, x, dynamic=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert dynamic(x).dtype == torch.float32
        torch.testing.assert_close(dynamic(x), pool(x), rtol=1e-6, atol=1e-6)


@pytest.mark.cuda
@pytest.mark.parametrize("family", ["avg", "max"])
def test_cuda_autocast_keeps_the_dtype_and_values_of_the_native_pool(family: str) -> None:
    pool = POOLS[family, 2]((5, 7))
    x = torch.randn(1, 2, 13, 11, device="cuda")
    for converted in (fxpool.convert(pool, x), fxpool.convert(pool, x, dynamic=True)):
        with torch.autocast("cuda", dtype=torch.float16):
            assert converted(x).dtype == pool(x).dtype == torch.float32
            torch.testing.assert_close(converted(x), pool(x), rtol=1e-6, atol=1e-6)
            with traced_forms():
                torch.testing.assert_close(converted(x), pool(x), rtol=1e-6, atol=1e-6)


def small_net(family: str) -> tuple[nn.Module, torch.Tensor]:
    return nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), POOLS[family, 2]((5, 7))).eval(), torch.randn(1, 2, 13, 11)


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("family", ["avg", "max"])
def test_torch_jit_script_of_a_converted_model(family: str, dynamic: bool) -> None:
    model, x = small_net(family)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch.jit.script's own deprecation
        scripted = torch.jit.script(fxpool.convert(model, x, dynamic=dynamic))
    for other in (x, torch.randn(2, 2, 9, 14)):
        torch.testing.assert_close(scripted(other), model(other), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("family", ["avg", "max"])
def test_quantize_fx_on_a_converted_model(family: str) -> None:
    from torch.ao.quantization import get_default_qconfig_mapping, quantize_fx

    model, x = small_net(family)
    results = []
    for candidate in (model, fxpool.convert(model, x)):
        prepared = quantize_fx.prepare_fx(candidate, get_default_qconfig_mapping(), (x,))
        prepared(x)
        results.append(quantize_fx.convert_fx(prepared)(x))
    converted, original = (r.dequantize() if r.is_quantized else r for r in reversed(results))
    # the same quantized convolution; the pool in float after it (converted) or on quantized values (original)
    torch.testing.assert_close(converted, original, rtol=0.05, atol=0.05)


@pytest.mark.parametrize("family", ["avg", "max"])
def test_vmap_and_functional_call_on_a_converted_model(family: str) -> None:
    model, x = small_net(family)
    converted = fxpool.convert(model, x)
    xs = torch.randn(3, 2, 13, 11)
    torch.testing.assert_close(torch.vmap(converted)(xs), torch.vmap(model)(xs), rtol=1e-6, atol=1e-6)
    with traced_forms():
        torch.testing.assert_close(torch.vmap(converted)(xs), torch.vmap(model)(xs), rtol=1e-6, atol=1e-6)
    parameters = {name: torch.randn_like(p) for name, p in model.named_parameters()}
    torch.testing.assert_close(
        torch.func.functional_call(converted, parameters, (x,)),
        torch.func.functional_call(model, parameters, (x,)),
        rtol=1e-5,
        atol=1e-5,
    )


def test_torch_jit_trace_then_save_and_load_keeps_the_size_check(tmp_path) -> None:
    model, x = small_net("avg")
    traced = torch.jit.trace(fxpool.convert(model, x), (x,))
    buffer = io.BytesIO()
    torch.jit.save(traced, buffer)
    buffer.seek(0)
    loaded = torch.jit.load(buffer)
    torch.testing.assert_close(loaded(x), model(x), rtol=1e-5, atol=1e-5)
    with pytest.raises(Exception, match="traced for spatial size"):
        loaded(torch.randn(1, 2, 11, 13))
