"""ExactAdaptivePool against PyTorch's adaptive pools: values and gradients.

Tolerances: float64 rtol=atol=1e-12, float32 rtol=atol=1e-6 (gradients 1e-5), float16/bfloat16 the defaults of
``torch.testing.assert_close`` for that dtype (against the float64 pool of the same rounded input);
max-pool values are compared bit for bit, and their gradients reach the same positions.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from inputs import with_non_finite

from fxpool import planning, replacements, steps
from fxpool.errors import SpatialSizeError
from fxpool.planning import choose_plan
from fxpool.replacements import ExactAdaptivePool
from fxpool.sizechecks import traced_forms

NATIVE = {
    ("avg", 1): F.adaptive_avg_pool1d,
    ("avg", 2): F.adaptive_avg_pool2d,
    ("avg", 3): F.adaptive_avg_pool3d,
    ("max", 1): F.adaptive_max_pool1d,
    ("max", 2): F.adaptive_max_pool2d,
    ("max", 3): F.adaptive_max_pool3d,
}
TOLERANCE = {
    torch.float64: dict(rtol=1e-12, atol=1e-12),
    torch.float32: dict(rtol=1e-6, atol=1e-6),
    torch.float16: {},
    torch.bfloat16: {},
}
# A gradient sums up to ~30 upstream terms per input (overlapping windows, upsampling), in another
# order than PyTorch's kernel, so float32 gets 10x the forward tolerance.
GRAD_TOLERANCE = {**TOLERANCE, torch.float32: dict(rtol=1e-5, atol=1e-5)}


@pytest.fixture
def max_form(monkeypatch) -> None:
    """Run general windows (max and average) in their traced form in eager: eager itself runs PyTorch's
    kernel there, which would make a comparison with PyTorch one that cannot fail."""
    monkeypatch.setattr(ExactAdaptivePool, "runs_native_in_eager", property(lambda self: False))


def assert_same_pool(family: str, x: torch.Tensor, out_sizes: tuple, with_grad: bool = True) -> None:
    """Forward (and backward) of the replacement equal PyTorch's at the dtype's tolerance."""
    dims = len(out_sizes)
    in_sizes = tuple(x.shape[-dims:])
    follows = tuple(o is None for o in out_sizes)
    resolved = tuple(i if o is None else o for i, o in zip(in_sizes, out_sizes))
    weight_dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    plan = choose_plan(family, in_sizes, resolved, follows)
    module = ExactAdaptivePool(plan, "test", weight_dtype, x.device, batched=x.dim() == dims + 2)
    native = NATIVE[(family, dims)]
    tolerance = dict(rtol=0, atol=0) if family == "max" else TOLERANCE[x.dtype]

    a = x.detach().clone().requires_grad_(with_grad)
    b = x.detach().clone().requires_grad_(with_grad)
    ours = module(a)
    theirs = native(b, out_sizes)
    if x.dtype in (torch.float16, torch.bfloat16) and family == "avg":
        # Some native CPU kernels (avg_pool3d in bfloat16) accumulate in low precision; compare with
        # the exact function of the same rounded input instead, rounded once to the dtype.
        theirs = native(b.detach().double(), out_sizes).to(x.dtype)
    torch.testing.assert_close(ours, theirs, **tolerance)
    if plan.onnx_steps:  # what ONNX export runs (forward values)
        torch.testing.assert_close(module.onnx_form(x.detach()), theirs.detach(), **tolerance)
    if with_grad and theirs.numel():
        upstream = torch.randn_like(theirs)
        ours.backward(upstream)
        theirs.backward(upstream)
        # Overlapping windows add upstream gradients in another order: float rounding only.
        torch.testing.assert_close(a.grad, b.grad, **GRAD_TOLERANCE[x.dtype])
        if family == "max":  # the gradient reaches exactly the positions PyTorch's argmax picks
            assert torch.equal(a.grad != 0, b.grad != 0)


@pytest.mark.parametrize("family", ["avg", "max"])
@pytest.mark.parametrize("in_size", range(1, 17))
@pytest.mark.usefixtures("max_form")
def test_exhaustive_1d(family: str, in_size: int) -> None:
    """Every input length 1..16 against every output length 1..20, float64, with gradients."""
    for out_size in range(1, 21):
        x = torch.randn(2, 3, in_size, dtype=torch.float64)
        assert_same_pool(family, x, (out_size,))


@pytest.fixture(params=list(planning.AVERAGE_FORM_LIMITS))
def average_form(request) -> Iterator[str]:
    """Each general average form forced on every non-uniform axis, whatever its windows."""
    with planning.forced_form(request.param):
        yield request.param


@pytest.mark.parametrize("in_size", range(1, 17))
@pytest.mark.usefixtures("max_form")
def test_exhaustive_1d_in_every_average_form(in_size: int, average_form: str) -> None:
    """Each general average form against PyTorch at every length 1..16 -> 1..20, float64, with gradients."""
    for out_size in range(1, 21):
        plan = choose_plan("avg", (in_size,), (out_size,))
        window = any(isinstance(step, steps.WindowReduceStep) for step in plan.onnx_steps)
        assert ("window" if window else plan.axes[0].kind) in ("identity", "reduce", "pool", "upsample", average_form)
        assert_same_pool("avg", torch.randn(2, 3, in_size, dtype=torch.float64), (out_size,))


@st.composite
def pool_cases(draw):
    dims = draw(st.integers(1, 3))
    limit = 24 if dims < 3 else 10
    in_sizes = tuple(draw(st.integers(1, limit)) for _ in range(dims))
    sizes = st.integers(1, limit + 6)
    if dims > 1:  # adaptive_*_pool1d takes no None
        sizes = st.one_of(sizes, st.none())
    out_sizes = tuple(draw(sizes) for _ in range(dims))
    batch = draw(st.sampled_from([None, 0, 1, 2]))
    channels = draw(st.integers(1, 4))
    dtype = draw(st.sampled_from([torch.float32, torch.float64, torch.float16, torch.bfloat16]))
    channels_last = dims in (2, 3) and batch not in (None,) and draw(st.booleans())
    family = draw(st.sampled_from(["avg", "max"]))
    return family, dims, in_sizes, out_sizes, batch, channels, dtype, channels_last


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pool_cases())
@pytest.mark.usefixtures("max_form")
def test_random_sizes_dtypes_layouts(case) -> None:
    family, dims, in_sizes, out_sizes, batch, channels, dtype, channels_last = case
    shape = ((batch,) if batch is not None else ()) + (channels,) + in_sizes
    x = torch.randn(shape, dtype=torch.float64).to(dtype)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last if dims == 2 else torch.channels_last_3d)
    assert_same_pool(family, x, out_sizes, with_grad=dtype in (torch.float32, torch.float64))


@pytest.mark.parametrize("family", ["avg", "max"])
@pytest.mark.parametrize(
    "in_sizes,out_sizes",
    [
        ((10, 10), (7, 7)),
        ((7, 7), (3, 3)),
        ((4, 5), (16, 20)),
        ((4, 5), (6, 6)),
        ((13, 17), (5, 7)),
        ((64, 64), (6, 6)),
        ((8, 14, 14), (4, 7, 7)),
        ((5, 9, 6), (3, 4, 6)),
        ((33,), (6,)),
    ],
)
@pytest.mark.usefixtures("max_form")
def test_named_shapes_in_every_dtype(family: str, in_sizes: tuple, out_sizes: tuple) -> None:
    for dtype in TOLERANCE:
        x = torch.randn(2, 3, *in_sizes, dtype=torch.float64).to(dtype)
        assert_same_pool(family, x, out_sizes, with_grad=dtype in (torch.float32, torch.float64))


@pytest.mark.usefixtures("max_form")
def test_max_propagates_nan_and_inf_like_pytorch() -> None:
    for in_size, out_size in [(10, 7), (7, 3), (4, 8), (4, 6), (9, 1)]:
        x = torch.randn(2, 3, in_size, dtype=torch.float64)
        x[0, 0, in_size // 2] = float("nan")
        x[0, 1, 0] = float("inf")
        x[1, 2, -1] = float("-inf")
        module = ExactAdaptivePool(choose_plan("max", (in_size,), (out_size,)))
        torch.testing.assert_close(module(x), F.adaptive_max_pool1d(x, out_size), rtol=0, atol=0, equal_nan=True)


def _exact_max_gradients(x: torch.Tensor, out_sizes: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    # Integer upstream gradients make every sum exact, so the comparison can be bit-for-bit.
    native = NATIVE["max", len(out_sizes)]
    module = ExactAdaptivePool(choose_plan("max", tuple(x.shape[2:]), out_sizes))
    ours, theirs = x.clone().requires_grad_(), x.clone().requires_grad_()
    upstream = torch.randint(-8, 9, native(x, out_sizes).shape, generator=torch.Generator().manual_seed(1)).double()
    torch.testing.assert_close(module(ours), native(theirs, out_sizes), rtol=0, atol=0, equal_nan=True)
    module(ours).backward(upstream)
    native(theirs, out_sizes).backward(upstream)
    return ours.grad, theirs.grad


@pytest.mark.parametrize("in_sizes", [(3, 4), (5, 4), (3, 9), (6, 7), (7, 10), (2, 3, 5)])
@pytest.mark.usefixtures("max_form")
def test_max_gradient_goes_to_the_first_of_tied_maxima_in_row_major_order(in_sizes: tuple) -> None:
    # Values in {0, 1} tie inside almost every window; PyTorch picks the first maximum in row-major
    # order, which per-axis maxima (column by column) would not. All zeros could not tell them apart.
    x = torch.randint(0, 2, (2, 3, *in_sizes), generator=torch.Generator().manual_seed(0)).double()
    outputs = [(1, 2, 3, 4, 5, 7)] * len(in_sizes)
    for out_sizes in itertools.product(*outputs):
        ours, theirs = _exact_max_gradients(x, out_sizes)
        assert torch.equal(ours, theirs), (in_sizes, out_sizes)


@pytest.mark.usefixtures("max_form")
def test_max_gradient_at_nan_goes_where_pytorch_sends_it() -> None:
    x = torch.randn(1, 2, 7, 9, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    x[0, 0, 2, 3] = x[0, 0, 2, 5] = x[0, 1, 4, 4] = float("nan")
    for out_sizes in [(3, 4), (5, 5), (2, 7), (7, 3)]:
        ours, theirs = _exact_max_gradients(x, out_sizes)
        assert torch.equal(ours, theirs), out_sizes


def test_weights_follow_device_and_dtype_changes_exactly() -> None:
    module = ExactAdaptivePool(choose_plan("avg", (2000,), (150,)), "test")  # gathered windows, rescaled
    weight = next(b for n, b in module.named_buffers() if n.startswith("weight_"))
    assert weight.dtype == torch.float32
    module.double()
    x = torch.randn(2, 3, 2000, dtype=torch.float64)
    with traced_forms():
        torch.testing.assert_close(module(x), F.adaptive_avg_pool1d(x, 150), rtol=1e-12, atol=1e-12)
    module.half()
    h = torch.randn(2, 3, 2000).half()
    with traced_forms():
        torch.testing.assert_close(module(h), F.adaptive_avg_pool1d(h.double(), 150).half())
    assert module.state_dict() == {}  # non-persistent: the converted model loads the original's weights


@pytest.mark.cuda
def test_cuda_matches_native() -> None:
    for family in ("avg", "max"):
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            x = torch.randn(2, 8, 10, 13, device="cuda").to(dtype)
            assert_same_pool(family, x, (7, 5), with_grad=dtype == torch.float32)


def test_guard_names_the_node_the_sizes_and_the_fix() -> None:
    module = ExactAdaptivePool(choose_plan("avg", (10, 10), (7, 7)), "features.avgpool")
    with pytest.raises(SpatialSizeError, match=r"features\.avgpool.*\(10, 10\).*\(12, 12\).*Convert again"):
        module(torch.randn(1, 3, 12, 12))


def test_size_agnostic_plans_need_no_guard() -> None:
    module = ExactAdaptivePool(choose_plan("avg", (10, 10), (1, 1)), "pool")
    for size in (3, 10, 17):
        x = torch.randn(1, 2, size, size + 1)
        torch.testing.assert_close(module(x), F.adaptive_avg_pool2d(x, 1), rtol=1e-6, atol=1e-6)


LAYOUT_POOLS = [  # (module, input shape): every replacement kind, 2d and 3d
    (torch.nn.AdaptiveAvgPool2d(7), (2, 3, 10, 10)),  # sliding
    (torch.nn.AdaptiveAvgPool2d(5), (2, 3, 10, 10)),  # AvgPool
    (torch.nn.AdaptiveAvgPool2d(20), (2, 3, 10, 10)),  # upsample
    (torch.nn.AdaptiveAvgPool2d((7, None)), (2, 3, 10, 10)),  # sliding on one axis
    (torch.nn.AdaptiveAvgPool2d(6), (2, 3, 33, 33)),  # slices
    (torch.nn.AdaptiveAvgPool2d(1), (2, 3, 10, 10)),  # mean
    (torch.nn.AdaptiveMaxPool2d(7), (2, 3, 10, 10)),  # gather + MaxPool
    (torch.nn.AdaptiveAvgPool3d((3, 7, 7)), (2, 3, 6, 10, 10)),
    (torch.nn.AdaptiveMaxPool3d((3, 7, 7)), (2, 3, 6, 10, 10)),
]


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("pool,shape", LAYOUT_POOLS, ids=lambda v: str(v))
def test_replacements_keep_the_channels_last_layout_as_the_native_pools_do(pool, shape, dynamic: bool) -> None:
    import fxpool

    layout = torch.channels_last if len(shape) == 4 else torch.channels_last_3d
    x = torch.randn(shape).contiguous(memory_format=layout)
    converted = fxpool.convert(pool, x, dynamic=dynamic)
    got, want = converted(x), pool(x)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    for memory_format in (torch.contiguous_format, layout):
        assert got.is_contiguous(memory_format=memory_format) == want.is_contiguous(memory_format=memory_format)


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_replacements_refuse_complex_input_and_empty_spatial_axes_as_the_native_pools_do(dynamic: bool) -> None:
    import fxpool
    from fxpool.errors import PoolCallError

    pool = torch.nn.AdaptiveAvgPool2d(7)
    converted = fxpool.convert(pool, torch.randn(1, 3, 10, 10), dynamic=dynamic)
    complex_input = torch.randn(1, 3, 10, 10, dtype=torch.complex64)
    with pytest.raises(NotImplementedError):
        pool(complex_input)
    with pytest.raises(PoolCallError, match="complex64; adaptive pooling needs a real floating tensor"):
        converted(complex_input)
    empty = torch.randn(1, 3, 10, 0)
    with pytest.raises(RuntimeError, match="non-zero size"):
        pool(empty)
    with pytest.raises(PoolCallError, match="empty spatial axis"):
        converted(empty)
    with pytest.raises(fxpool.PoolCallError, match=r"complex64 \(shape \(1, 3, 10, 10\)\); adaptive pooling needs a real"):
        fxpool.convert(pool, complex_input)


def test_a_size_error_names_the_pool_by_its_module_path() -> None:
    import fxpool

    converted = fxpool.convert(
        torch.nn.Sequential(torch.nn.Conv2d(3, 3, 1), torch.nn.AdaptiveAvgPool2d(7)), torch.randn(1, 3, 10, 10)
    )
    with pytest.raises(SpatialSizeError, match=r"^the adaptive pool at '1' of the converted model: .*\(10, 10\)"):
        converted(torch.randn(1, 3, 12, 12))


def test_zero_channels_convert_and_run_as_the_native_pools_do() -> None:
    import fxpool

    x = torch.randn(2, 0, 10, 10)
    pool = torch.nn.AdaptiveAvgPool2d(7)
    converted = fxpool.convert(pool, x)
    assert converted(x).shape == pool(x).shape == (2, 0, 7, 7)
    with pytest.raises(RuntimeError):  # the native max pool refuses an empty input; so does the conversion
        torch.nn.AdaptiveMaxPool2d(7)(x)
    with pytest.raises(fxpool.ExampleInputError, match="non-zero size"):
        fxpool.convert(torch.nn.AdaptiveMaxPool2d(7), x)


@settings(max_examples=150, deadline=None)
@given(pool_cases(), st.sampled_from(list(planning.AVERAGE_FORM_LIMITS)))
def test_random_sizes_dtypes_layouts_in_every_average_form(case, form: str) -> None:
    family, dims, in_sizes, out_sizes, batch, channels, dtype, channels_last = case
    native_in_eager = ExactAdaptivePool.runs_native_in_eager
    ExactAdaptivePool.runs_native_in_eager = property(lambda self: False)  # type: ignore[method-assign,assignment]
    try:
        with planning.forced_form(form):  # hypothesis: no function-scoped fixtures
            shape = ((batch,) if batch is not None else ()) + (channels,) + in_sizes
            x = torch.randn(shape, dtype=torch.float64).to(dtype)
            if channels_last:
                x = x.contiguous(memory_format=torch.channels_last if dims == 2 else torch.channels_last_3d)
            assert_same_pool("avg", x, out_sizes, with_grad=dtype in (torch.float32, torch.float64))
    finally:
        ExactAdaptivePool.runs_native_in_eager = native_in_eager  # type: ignore[method-assign]


def test_a_long_axis_keeps_memory_linear_in_its_length() -> None:
    import fxpool

    pool = torch.nn.AdaptiveAvgPool1d(16000)  # 16384 -> 16000: a dense averaging matrix would hold 1.0 GB
    x = torch.randn(1, 2, 16384)
    converted = fxpool.convert(pool, x)
    (record,) = fxpool.report_of(converted).records
    assert record.replacement.startswith("sliding L 16384->16000 (k=2,3)")
    kept = sum(b.numel() * b.element_size() for b in converted.buffers())
    assert kept < 1_000_000, kept  # indices and scales: about 16000 x 3 x 8 bytes
    torch.testing.assert_close(converted(x), pool(x), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
def test_the_long_axis_form_exports_with_portable_ops(dynamo: bool, tmp_path) -> None:
    import fxpool

    pool = torch.nn.AdaptiveAvgPool1d(4000)
    result = fxpool.export(pool, torch.randn(1, 2, 4096), tmp_path / "long.onnx", dynamo=dynamo)
    assert {"Gather", "Einsum" if dynamo else "ReduceSum", "Div"} <= set(result.op_histogram), result.op_histogram  # window sums
    assert not {"GatherND", "MatMul", "Mul", "Add", "Where", "AveragePool"} & set(result.op_histogram), result.op_histogram
    assert result.max_abs_error < 1e-5


def test_general_max_windows_run_pytorchs_kernel_in_eager_and_the_gather_form_when_traced() -> None:
    module = ExactAdaptivePool(choose_plan("max", (33, 33), (6, 6)))
    assert module.runs_native_in_eager
    x = torch.randn(2, 3, 33, 33)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as eager:
        module(x)
    assert "aten::adaptive_max_pool2d" in {e.name for e in eager.events()}
    traced = torch.fx.symbolic_trace(module)
    assert "index_select" in traced.code and "adaptive_max_pool" not in traced.code
    torch.testing.assert_close(traced(x), F.adaptive_max_pool2d(x, 6), rtol=0, atol=0)
    torch.testing.assert_close(module.traced_form(x), F.adaptive_max_pool2d(x, 6), rtol=0, atol=0)
    with traced_forms(), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as forced:
        pooled = module(x)
    torch.testing.assert_close(pooled, F.adaptive_max_pool2d(x, 6), rtol=0, atol=0)
    names = {e.name for e in forced.events()}
    assert "aten::index_select" in names and "aten::adaptive_max_pool2d" not in names
    assert not ExactAdaptivePool(choose_plan("max", (14, 14), (7, 7))).runs_native_in_eager  # a MaxPool already


FAST_PLANS = [  # (family, in sizes, out sizes): the one-step plans eager runs in one call
    ("avg", (9, 7), (1, 1)),  # mean
    ("avg", (8, 12), (4, 3)),  # AvgPool2d
    ("max", (8, 12), (4, 3)),  # MaxPool2d
    ("avg", (10, 10), (7, 7)),  # PyTorch's own kernel in eager
    ("max", (10, 10), (7, 7)),  # PyTorch's own kernel in eager
    ("avg", (6, 8, 10), (3, 4, 5)),  # AvgPool3d
]


@pytest.mark.parametrize("family,in_sizes,out_sizes", FAST_PLANS)
@pytest.mark.parametrize("batched", [True, False])
def test_the_eager_fast_path_equals_the_general_one_and_tracers_never_take_it(
    family, in_sizes, out_sizes, batched, monkeypatch
) -> None:
    module = ExactAdaptivePool(choose_plan(family, in_sizes, out_sizes), "fast", batched=batched)
    assert module._fast
    x = torch.randn(*((2, 3) if batched else (3,)), *in_sizes, requires_grad=True)
    fast = module(x)
    with traced_forms():  # the general path, in the plan's order
        general = module(x)
    native = NATIVE[(family, len(in_sizes))](x, out_sizes)
    torch.testing.assert_close(fast, native, **(dict(rtol=0, atol=0) if family == "max" else TOLERANCE[torch.float32]))
    torch.testing.assert_close(fast, general, **TOLERANCE[torch.float32])
    upstream = torch.randn_like(fast)
    (grad_fast,) = torch.autograd.grad(fast, x, upstream)
    (grad_native,) = torch.autograd.grad(native, x, upstream)
    torch.testing.assert_close(grad_fast, grad_native, **GRAD_TOLERANCE[torch.float32])
    other = torch.randn(*((2, 3) if batched else (3,)), *(s + 1 for s in in_sizes))
    if module.plan.size_agnostic:  # a mean is exact at every size, fast or not
        torch.testing.assert_close(module(other), NATIVE[(family, len(in_sizes))](other, out_sizes), **TOLERANCE[torch.float32])
    else:  # another size is never computed by the fast path
        with pytest.raises(SpatialSizeError):
            module(other)

    def refuse(plan: object, x: torch.Tensor, kind: str) -> torch.Tensor:
        raise AssertionError("a tracer took the eager fast path")

    monkeypatch.setattr(replacements, "run_fast", refuse)
    torch.jit.trace(module, x.detach(), check_trace=False)  # traced, it must run the general path


@pytest.mark.parametrize("family", ["avg", "max"])
def test_torch_compile_gets_pytorchs_own_pool_and_exporters_the_portable_form(family: str) -> None:
    graphs: list[torch.fx.GraphModule] = []

    def capture(gm: torch.fx.GraphModule, inputs: list) -> object:
        graphs.append(gm)
        return gm.forward

    module = ExactAdaptivePool(choose_plan(family, (10, 10), (7, 7)), "p")
    x = torch.randn(1, 3, 10, 10)
    compiled = torch.compile(module, backend=capture, fullgraph=True)
    torch.testing.assert_close(compiled(x), NATIVE[(family, 2)](x, (7, 7)), rtol=0, atol=0)
    assert f"adaptive_{family}_pool2d" in graphs[0].code  # inductor lowers the native op itself
    program = torch.export.export(module, (x,))  # an exporter: the plan's plain ops, no adaptive pool
    assert not [n for n in program.graph.nodes if n.op == "call_function" and "adaptive" in str(n.target)]


def test_a_3d_average_pool_is_two_2d_pools_under_torch_export(tmp_path) -> None:
    # ExecuTorch's runtime has no avg_pool3d kernel
    module = ExactAdaptivePool(choose_plan("avg", (7, 10, 10), (3, 5, 5)), "pool3d")
    for x in (torch.randn(2, 4, 7, 10, 10), torch.randn(4, 7, 10, 10)):
        program = torch.export.export(module, (x,))
        targets = {str(n.target) for n in program.graph.nodes if n.op == "call_function"}
        assert "aten.avg_pool2d.default" in targets and not any("pool3d" in t for t in targets), targets
        torch.testing.assert_close(program.module()(x), F.adaptive_avg_pool3d(x, (3, 5, 5)), **TOLERANCE[torch.float32])


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
@pytest.mark.parametrize(
    ("in_sizes", "out_sizes", "pools"), [((12,), (4,), 1), ((7, 10, 10), (3, 5, 5), 2), ((8, 12, 9), (4, 3, 9), 2)], ids=str
)
def test_1d_and_3d_average_pools_export_as_2d_average_pools(in_sizes, out_sizes, pools: int, dynamo: bool, tmp_path) -> None:
    """onnxruntime's AveragePool from opset 19 walks 1d and 3d windows 4x slower than 2d ones: a 1d pool is a 2d one
    over planes of height 1, a 3d one two 2d ones; exact with NaN and ±inf in onnxruntime, batched or not."""
    import onnx

    onnxruntime = pytest.importorskip("onnxruntime")
    native = {1: F.adaptive_avg_pool1d, 3: F.adaptive_avg_pool3d}[len(in_sizes)]
    module = ExactAdaptivePool(choose_plan("avg", in_sizes, out_sizes), "pool")
    for batch in ((2, 4), (4,)):
        x = with_non_finite((*batch, *in_sizes), seed=len(batch), every=9)
        path = str(tmp_path / f"pool{len(batch)}.onnx")
        torch.onnx.export(module, (x,), path, dynamo=dynamo, input_names=["x"])
        nodes = [n for n in onnx.load(path).graph.node if n.op_type == "AveragePool"]
        kernels = [len(a.ints) for n in nodes for a in n.attribute if a.name == "kernel_shape"]
        assert kernels == [2] * pools, kernels
        ours = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x.numpy()})[0]
        torch.testing.assert_close(torch.from_numpy(ours), native(x, out_sizes), rtol=1e-5, atol=1e-6, equal_nan=True)


@pytest.mark.parametrize(
    ("in_sizes", "out_sizes"), [((10, 10), (7, 7)), ((33, 33), (6, 6)), ((4, 4), (6, 6)), ((40, 40), (6, 6)), ((10, 33), (7, 6))]
)
def test_2d_window_means_are_average_pools_under_torch_export_where_xnnpack_takes_them(in_sizes, out_sizes) -> None:
    """Sliding and sliced windows under torch.export for a PyTorch runtime: each window an AvgPool2d over the whole
    window (XNNPACK takes it), no gather and no mean over one axis (left outside XNNPACK's partition); exact with NaN
    and ±inf in the input, which stay in their windows (tolerance: float32 rounding, NaN where PyTorch's is)."""
    plan = choose_plan("avg", in_sizes, out_sizes)
    assert {step.__class__.__name__ for step in plan.steps} & {"SlidingWindowStep", "WindowSlicesStep"}, plan.describe()
    module = ExactAdaptivePool(plan, "p")
    x = torch.randn(2, 3, *in_sizes)
    x[0, 0, 1, 2], x[0, 1, -1, -1], x[1, 2, 0, 0] = float("nan"), float("inf"), float("-inf")
    program = torch.export.export(module, (x,))
    targets = {str(n.target) for n in program.graph.nodes if n.op == "call_function"}
    assert not targets & {"aten.index_select.default", "aten.mean.dim"}, targets
    assert "aten.avg_pool2d.default" in targets, targets
    torch.testing.assert_close(program.module()(x), F.adaptive_avg_pool2d(x, out_sizes), rtol=1e-5, atol=1e-6, equal_nan=True)


def test_a_mean_that_keeps_an_axis_at_its_traced_size_checks_that_size_in_eager() -> None:
    """3x3 -> 1x3 is a mean over H with W kept: at 4x4 the original gives 1x3, so the replacement must refuse
    (it once took the eager fast path unchecked and returned 1x4)."""
    import fxpool

    pool = torch.nn.AdaptiveAvgPool2d((1, 3))
    converted = fxpool.convert(pool, torch.randn(1, 3, 3, 3))
    with pytest.raises(fxpool.SpatialSizeError, match=r"spatial size \('\*', 3\)"):
        converted(torch.randn(1, 3, 4, 4))
    size_agnostic = fxpool.convert(torch.nn.AdaptiveAvgPool2d((1, None)), torch.randn(1, 3, 3, 3))
    torch.testing.assert_close(size_agnostic(torch.randn(1, 3, 4, 4)).shape, torch.Size([1, 3, 1, 4]))
