"""The choice of an exact replacement for one adaptive pool, as a pure function of sizes.

:func:`choose_plan` takes the pool family (``"avg"`` or ``"max"``), the spatial input sizes and the
output sizes, and returns a :class:`PoolPlan`: one :class:`AxisChoice` per spatial axis and the
ordered steps that compute the pool exactly.

Per axis, the rules are tried in this fixed order of preference (``AXIS_RULES``); the first that
applies wins, and every one that does not says why:

==============  ===========================================  ======================================
kind            when                                         computed by
==============  ===========================================  ======================================
``identity``    output == input (or ``None`` in output_size)  nothing
``reduce``      output 1                                      mean / amax over the axis
``pool``        all windows one length k, starts step s        AvgPool / MaxPool(kernel k, stride s)
``upsample``    output == r * input for an integer r >= 2       nearest upsampling
``sliding``     average family, windows of 2 to                 one stride-1 AvgPool per window length,
                ``SLIDING_MAX_LENGTH`` entries                 then a constant-index gather of the starts
``slices``      average family, at most ``SLICES_MAX_WINDOWS``  each window sliced and averaged, then
                windows                                       concatenated
``gather``      anything else                                  constant-index gather of each window, padded
                                                             to the longest (max: repeating its last
                                                             position; average: a zero, then rescaled),
                                                             then one MaxPool / AvgPool
==============  ===========================================  ======================================

Every form sums or compares only the entries of a window, so a NaN or an infinity stays in the
windows that hold it, as in PyTorch's kernel. (A matrix product would not: ``0 * inf`` is NaN, and an
averaging matrix multiplies every entry of the axis.)

Steps run in this order: one pooling over all spatial axes (or one reduction), then the
sliding and sliced axes, most-shrinking first, then one upsampling. Every average kind is separable
by axis, so the order only changes the cost. The max family is not separable for its gradient: PyTorch sends it to the first maximum
of each window in row-major order, and per-axis maxima would pick it column by column. So general
max axes are first gathered — each window's positions copied out in order, padded to the longest
window by repeating its last position — and then a single MaxPool covers every axis at once
(gathered axes: kernel = stride = that length), which scans each window row-major as PyTorch does.

The plan's data (its steps) is :mod:`fxpool.steps`; whether a pool is replaced at all, and the one
decision per pool, :mod:`fxpool.guards`. Here: the per-axis rules and the cost constants fitted to
the runtimes, the ONNX forms, and the choice of the ``dynamic=True`` form. Nothing here knows of
torch, torch.fx or ONNX.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from math import prod
from typing import Literal

from .steps import (
    AxisChoice,
    BlockReduceStep,
    PoolFamily,
    PoolPlan,
    PoolStep,
    ReduceStep,
    SlidingWindowStep,
    SpatialLayoutStep,
    Step,
    UpsampleStep,
    WindowCountStep,
    WindowGatherStep,
    WindowReduceStep,
    WindowScaleStep,
    WindowSlicesStep,
    WindowZeroStep,
    axis_names,
)
from .windows import uniform_stride, upsample_factor, window_lengths

# Which exact form a general average axis gets, fitted to onnxruntime on the CPU (one thread, a quiet
# machine; ``python -m model_zoo_checks.benchmarks --sections avgforms``, ms): a stride-1 AvgPool per
# window length wins while windows are short, up-sampling included (10->7 at 8x512: 2.6 against 4.0 for
# slices; 14->6: 1.8 against 3.7; 11->4: 0.15 against 0.26; 20->7: 0.56 against 0.58; 6->17 at 8x64:
# 0.62 against 1.23), slicing each window wins once they are long (33->6: 0.64 against 0.68; 64->6: 1.8
# against 5.3; 1d 1000->101: 0.79 against 8.7) and on 3d pools (onnxruntime's 3d AveragePool: 5x10x10->3x7x7
# 0.47 against 1.7), while the windows are few enough that one Slice and one ReduceMean each cost
# little; beyond that the windows are gathered, zero-padded.
SLIDING_MAX_LENGTH = 4
SLICES_MAX_WINDOWS = 128
# The max family's ONNX form (window maxima) moves the spatial axes in front of the others where its
# last-axis gathers would copy at least this many entries one by one per input entry
# (:func:`last_axis_copies`). Fitted to onnxruntime, both layouts of fxpool's graph timed side by side
# (``python -m model_zoo_checks.benchmarks --sections maxforms``, ms at one thread; the table is on
# docs/results/benchmarks.md): spatial axes first won from 10x10->7x7 (1.47 copies: 0.99 against 2.84)
# down to 25x25->7x7 (0.39: 0.92 against 1.69), 3d 9x10x11->4x3x7 (0.25: 0.11 against 0.21), 33x33->6x6
# (0.20: 0.58 against 0.79) and 50x50->6x6 (0.13: 1.48 against 1.59), and lost at 56x56->6x6 (0.115: 2.68
# against 2.00), 64x64->6x6 (0.105: 4.0 against 2.6) and 100x60->6x6 (0.06). Earlier prototypes, before
# the gathers read the spatial-first layout as one block per window position, had put the line at 0.5.
SPATIAL_FIRST_MIN_COPIES = 0.12
# The average family's window form (window sums by gathers, spatial axes first) replaces the sliding
# AvgPools and window slices in ONNX export where the last-axis copies (:func:`last_axis_copies`) reach
# this. Fitted to onnxruntime, one thread (``python -m model_zoo_checks.benchmarks --sections avgforms``,
# ms, window form against the best of the others; docs/results/benchmarks.md has the table): it won on
# every small plane and the 1d and 3d cases, 8x512 10x10->7x7 (1.47 copies: 1.25 against 2.52), 3d
# 5x10x10->3x7x7 (0.88: 0.10 against 0.42), down to 33x33->6x6 (0.198: 0.56 against 0.59), and lost
# where the planes are large and its Transpose and Pad cost most: 40x40->6x6 (0.18: 1.35 against 0.79),
# 64x48->6x40 (0.156: 1.21 against 0.95), 64->6 (0.105: 6.6 against 2.0), 100x60->6 (0.06).
WINDOW_SUMS_MIN_COPIES = 0.19
# Pools whose windows tile an axis (one length, stride equal to it) get a block form in ONNX export
# (:func:`onnx_block_steps`) where the last spatial axis's windows hold at least this many entries.
# Fitted to onnxruntime against its AveragePool of the same windows (side by side, block time over the
# pool's at one thread, two in brackets): from 16 entries the blocks won or tied on every plane, 32x32->2x2
# over 2048 channels 0.54 (0.56), over 512 0.59 (0.62), 40x40->2x2 over 512 0.46 (0.49), 64x64->2x2 0.40
# (0.43), and on small tensors where both take about 0.02 ms 0.64-1.09; with 8 to 12 entries they won on
# large planes (48x48->6x6 0.70, 40x40->4x4 0.67) and lost on small ones (16x16->2x2 over 512 channels
# 3.4 (1.4), 24x24->3x3 1.7, 56x56->7x7 over 64 channels 1.25); with 2 or 4 entries they lost everywhere
# (14->7 over 8x512: 5x). The max family's ReduceMax against MaxPool behaved alike.
BLOCK_MIN_LENGTH = 16
# The limits above that send every general average axis to one exact form ("window": ONNX export's
# window sums wherever an axis is general), for the benchmark's fits and the tests of each form.
AVERAGE_FORM_LIMITS: dict[str, dict[str, float]] = {
    "sliding": {"SLIDING_MAX_LENGTH": 1 << 30, "WINDOW_SUMS_MIN_COPIES": 1 << 30},
    "slices": {"SLIDING_MAX_LENGTH": 0, "SLICES_MAX_WINDOWS": 1 << 30, "WINDOW_SUMS_MIN_COPIES": 1 << 30},
    "gather": {"SLIDING_MAX_LENGTH": 0, "SLICES_MAX_WINDOWS": 0, "WINDOW_SUMS_MIN_COPIES": 1 << 30},
    "window": {"WINDOW_SUMS_MIN_COPIES": 0},
}
# The same for the max family's window maxima: kept in the input's layout, or spatial axes first.
MAX_FORM_LIMITS: dict[str, dict[str, float]] = {
    "input_layout": {"SPATIAL_FIRST_MIN_COPIES": 1 << 30},
    "spatial_first": {"SPATIAL_FIRST_MIN_COPIES": 0},
}


@contextmanager
def forced_form(form: str) -> Iterator[None]:
    """Plan as ``form`` (a key of :data:`AVERAGE_FORM_LIMITS` or :data:`MAX_FORM_LIMITS`) inside the
    block, and restore the fitted limits after it. Changes module state: not for concurrent planning."""
    names = ("SLIDING_MAX_LENGTH", "SLICES_MAX_WINDOWS", "WINDOW_SUMS_MIN_COPIES", "SPATIAL_FIRST_MIN_COPIES")
    saved = {name: globals()[name] for name in names}
    globals().update((AVERAGE_FORM_LIMITS | MAX_FORM_LIMITS)[form])
    try:
        yield
    finally:
        globals().update(saved)


# --- per-axis rules: each returns an AxisChoice, or a string saying why it does not apply ---

AxisRule = Callable[[PoolFamily, int, int, bool, int], AxisChoice | str]  # (family, in, out, follows input, spatial dims)


def _identity_rule(family: PoolFamily, in_size: int, out_size: int, follows: bool, spatial_dims: int) -> AxisChoice | str:
    if follows:
        return AxisChoice("identity", in_size, in_size, "None: keeps its size", follows_input=True)
    if in_size == out_size:
        return AxisChoice("identity", in_size, out_size, f"{in_size}->{out_size}: identity")
    return "output differs from input"


def _reduce_rule(family: PoolFamily, in_size: int, out_size: int, follows: bool, spatial_dims: int) -> AxisChoice | str:
    if out_size == 1:
        op = "mean" if family == "avg" else "amax"
        return AxisChoice("reduce", in_size, 1, f"{in_size}->1: one window, {op}", kernel=in_size, stride=in_size)
    return "output is not 1"


def _pool_rule(family: PoolFamily, in_size: int, out_size: int, follows: bool, spatial_dims: int) -> AxisChoice | str:
    uniform = uniform_stride(in_size, out_size)
    if uniform is None:
        return f"windows of lengths {window_lengths(in_size, out_size)} or uneven starts"
    kernel, stride = uniform
    return AxisChoice(
        "pool", in_size, out_size, f"{in_size}->{out_size}: uniform windows k={kernel} s={stride}", kernel=kernel, stride=stride
    )


def _upsample_rule(family: PoolFamily, in_size: int, out_size: int, follows: bool, spatial_dims: int) -> AxisChoice | str:
    factor = upsample_factor(in_size, out_size)
    if factor is None:
        return "output is not an integer multiple of the input"
    return AxisChoice("upsample", in_size, out_size, f"{in_size}->{out_size}: {factor}x multiple, nearest", factor=factor)


def _sliding_rule(family: PoolFamily, in_size: int, out_size: int, follows: bool, spatial_dims: int) -> AxisChoice | str:
    lengths = window_lengths(in_size, out_size)
    if family != "avg":
        return "max family: windows are gathered, so a tie's gradient lands where PyTorch's does"
    if lengths[-1] > SLIDING_MAX_LENGTH:
        return f"windows of up to {lengths[-1]} entries (sliding pools up to {SLIDING_MAX_LENGTH})"
    if spatial_dims == 3:
        return "a 3d pool: onnxruntime's 3d AveragePool is slow, slices win"
    return AxisChoice(
        "sliding",
        in_size,
        out_size,
        f"{in_size}->{out_size}: {_shape(lengths)}, a stride-1 AvgPool per length, then the starts gathered",
        kernel=lengths[-1],
    )


def _slices_rule(family: PoolFamily, in_size: int, out_size: int, follows: bool, spatial_dims: int) -> AxisChoice | str:
    if family != "avg":
        return "max family: windows are gathered"
    if out_size > SLICES_MAX_WINDOWS:
        return f"{out_size} windows (slices up to {SLICES_MAX_WINDOWS})"
    lengths = window_lengths(in_size, out_size)
    return AxisChoice("slices", in_size, out_size, f"{in_size}->{out_size}: {_shape(lengths)}, each window sliced and averaged")


def _gather_rule(family: PoolFamily, in_size: int, out_size: int, follows: bool, spatial_dims: int) -> AxisChoice:
    lengths = window_lengths(in_size, out_size)
    how = "zero-padded, averaged and rescaled" if family == "avg" else "max"
    return AxisChoice(
        "gather",
        in_size,
        out_size,
        f"{in_size}->{out_size}: {_shape(lengths)}, gathered windows, {how}",
        kernel=lengths[-1],
        stride=lengths[-1],
    )


def _shape(lengths: tuple[int, ...]) -> str:
    return f"windows of lengths {lengths}" if len(lengths) > 1 else f"{lengths[0]}-windows at uneven starts"


AXIS_RULES: tuple[AxisRule, ...] = (
    _identity_rule,
    _reduce_rule,
    _pool_rule,
    _upsample_rule,
    _sliding_rule,
    _slices_rule,
    _gather_rule,
)


def choose_axis(family: PoolFamily, in_size: int, out_size: int, follows_input: bool = False, spatial_dims: int = 2) -> AxisChoice:
    """The first rule of ``AXIS_RULES`` that applies to this axis, with why the earlier ones did not."""
    if in_size < 1 or out_size < 1:
        raise ValueError(f"adaptive pooling needs sizes >= 1, got {in_size} -> {out_size}")
    rejected: list[str] = []
    for rule in AXIS_RULES:
        choice = rule(family, in_size, out_size, follows_input, spatial_dims)
        if isinstance(choice, AxisChoice):
            return replace(choice, rejected=tuple(rejected))
        rejected.append(f"{rule.__name__.strip('_').removesuffix('_rule')}: {choice}")
    raise AssertionError("the general rule always applies")


def _shrink_order(axes: tuple[AxisChoice, ...], indices: list[int]) -> list[int]:
    """Most-shrinking axis first (the earlier axis among equals): later steps read less."""
    return sorted(indices, key=lambda a: (axes[a].out_size / axes[a].in_size, a))


def choose_plan(
    family: PoolFamily,
    in_sizes: tuple[int, ...],
    out_sizes: tuple[int, ...],
    follows_input: tuple[bool, ...] | None = None,
    scaled_output: bool = False,
) -> PoolPlan:
    """Choose the exact, cheapest replacement of an adaptive pool from its spatial sizes.

    ``follows_input`` marks the axes whose output_size is ``None``; ``scaled_output`` says the
    output sizes were derived from the input's (``scale_factor``), so no axis is size-agnostic.

    >>> choose_plan("avg", (7, 7), (3, 3)).describe()
    'AvgPool2d(k=(3, 3), s=(2, 2))'
    >>> choose_plan("avg", (10, 10), (7, 7)).describe()
    'sliding H 10->7 (k=2,3) -> sliding W 10->7 (k=2,3)'
    """
    if family not in ("avg", "max"):
        raise ValueError(f"family must be 'avg' or 'max', got {family!r}")
    if len(in_sizes) != len(out_sizes) or not 1 <= len(in_sizes) <= 3:
        raise ValueError(f"need 1 to 3 spatial axes with matching sizes, got {in_sizes} -> {out_sizes}")
    follows = follows_input or (False,) * len(in_sizes)
    if len(follows) != len(in_sizes):
        raise ValueError(f"follows_input has {len(follows)} entries for {len(in_sizes)} spatial axes")
    axes = tuple(choose_axis(family, i, o, f, len(in_sizes)) for i, o, f in zip(in_sizes, out_sizes, follows))
    steps = _steps(family, axes)
    return PoolPlan(
        family,
        tuple(in_sizes),
        tuple(a.out_size for a in axes),
        axes,
        steps,
        scaled_output,
        onnx_window_steps(family, axes),
    )


def onnx_window_steps(family: PoolFamily, axes: tuple[AxisChoice, ...]) -> tuple[Step, ...]:
    """The window form ONNX export runs (:class:`WindowReduceStep` per pooled axis, outer axes first, for
    averages between a :class:`WindowZeroStep` and a :class:`WindowCountStep`, then the upsampling); for
    a pool with no general axis, the block form of :func:`onnx_block_steps`; or ``()`` where ONNX export
    runs ``steps``.

    Max family, wherever an axis has general windows. Why not ``steps`` (each window gathered, padded
    to the longest, then one MaxPool): onnxruntime runs that 1.2-2.2x slower than OpenVINO's native
    AdaptiveMaxPool, and its MaxPool skips NaN where PyTorch's pools return NaN. The window maxima as
    elementwise Max of constant-index gathers are exact with NaN and ±inf, and measured 0.09-0.65x
    OpenVINO's native op at one and two onnxruntime threads (the max cases of ``python -m
    model_zoo_checks.benchmarks --sections pools``; see docs/results/benchmarks.md), 1.1-8x faster than
    the gather graph but for 100x60->6 (the gather graph 0.64-0.90x its time, NaN-blind) and 4x8->6x16
    at two threads (0.89x). Forms measured and not taken: a sliding MaxPool (stride 1) of
    the shortest window length, then two gathers of its result and a Max per axis (as fast on some
    cases, 2.4x slower on 100x60, and NaN-exact only with a NaN count per window beside it, which made
    it 1.3-3.3x slower); the same with the input moved channels-last first (faster on small planes,
    1.6x slower on 64x64). Outer axes go first: their gathers copy whole rows, and the last axis's
    element by element then reads the shrunk tensor; where :func:`last_axis_copies` reaches
    :data:`SPATIAL_FIRST_MIN_COPIES`, the spatial axes are moved in front first (:class:`SpatialLayoutStep`) and back after.

    Average family, where an axis has general windows and the plane is small enough that
    :func:`last_axis_copies` reaches :data:`WINDOW_SUMS_MIN_COPIES`: in the spatial-first layout, where
    every gather copies whole blocks, one zero appended to each axis with shorter windows
    (:class:`WindowZeroStep`), per pooled axis one gather of every window's positions and a sum over the
    span, and one division by the window sizes (:class:`WindowCountStep`). Against the sliding AvgPools or
    window slices of ``steps``, whose per-row copies along short rows cost most on small planes; and
    against the window means it replaced (a gather per window position, Where on a constant mask, Add,
    a Div per axis), faster on most cases and quantized as if the pool stayed in float: onnxruntime's
    static QDQ requantizes every Add, Where and Concat inside a pool and NNCF the input of every Add,
    ReduceSum and ReduceMean, while an Einsum (the sum over the span under torch.export) is left alone
    by both (the benchmark's quantization section; :func:`fxpool.forms.window_sums`).

    Only forward values: ONNX graphs are for inference; ``torch.export`` keeps ``steps``, whose max
    gradient goes to the first maximum in row-major order as PyTorch's does.
    """
    general = ("gather",) if family == "max" else ("sliding", "slices", "gather")
    if not any(axis.kind in general for axis in axes):
        return onnx_block_steps(family, axes)
    copies = last_axis_copies(axes)
    if family == "avg" and copies < WINDOW_SUMS_MIN_COPIES:
        return ()
    lengths = {i: window_lengths(axis.in_size, axis.out_size) for i, axis in enumerate(axes) if axis.kind in POOLED_KINDS}
    pooled = list(lengths)
    steps: list[Step] = [WindowReduceStep(family, i, axes[i].in_size, axes[i].out_size, lengths[i][-1]) for i in pooled]
    if family == "avg":
        uneven = tuple(i for i in pooled if len(lengths[i]) > 1)
        windows = tuple((a.in_size, a.out_size) if i in pooled else None for i, a in enumerate(axes))
        steps = [WindowZeroStep(uneven)] * bool(uneven) + steps + [WindowCountStep(windows)]
    if family == "avg" or copies >= SPATIAL_FIRST_MIN_COPIES:
        steps = [SpatialLayoutStep(True), *steps, SpatialLayoutStep(False)]
    if any(axis.kind == "upsample" for axis in axes):
        steps.append(UpsampleStep(tuple(None if axis.follows_input else axis.out_size for axis in axes)))
    return tuple(steps)


def onnx_block_steps(family: PoolFamily, axes: tuple[AxisChoice, ...]) -> tuple[Step, ...]:
    """The block form ONNX export runs for a pool whose windows tile every pooled axis, or ``()``.

    Per pooled axis, outer axes first, a :class:`BlockReduceStep`, then for averages one division by the
    window sizes. Where the last axis's windows hold at least :data:`BLOCK_MIN_LENGTH` entries:
    onnxruntime's AveragePool and MaxPool walk every window of every plane, while a reduction over an
    outer axis's blocks adds whole rows and the last axis's then reads a tensor that many times smaller:
    64x64->2x2 over 512 channels at 1.0-1.2x the read-once floor, where AveragePool took 3.7-4.1x (the
    benchmark's pools section). Shorter blocks keep the pool of ``steps``: a reduction over a few
    adjacent entries, or over short rows of a small plane, costs more per entry than the pool. Under
    torch.export the sums are Einsums, which static INT8 quantizers leave in float.
    """
    if any(a.kind not in ("identity", "pool", "reduce") for a in axes) or not any(a.kind == "pool" for a in axes):
        return ()
    if any(a.kind == "pool" and a.kernel != a.stride for a in axes):
        return ()  # overlapping windows
    last = axes[-1]
    if last.kind == "identity" or last.kernel < BLOCK_MIN_LENGTH:
        return ()
    pooled = [i for i, a in enumerate(axes) if a.kind != "identity"]
    steps: list[Step] = [BlockReduceStep(family, i, axes[i].in_size, axes[i].out_size) for i in pooled]
    if family == "avg":
        steps.append(WindowCountStep(tuple((a.in_size, a.out_size) if i in pooled else None for i, a in enumerate(axes))))
    return tuple(steps)


# axis kinds that reduce windows (every other kind keeps or repeats entries)
POOLED_KINDS = ("gather", "sliding", "slices", "pool", "reduce")


def last_axis_copies(axes: tuple[AxisChoice, ...]) -> float:
    """Entries a window form copies one by one along the last spatial axis, per input entry.

    In the input's layout a gather along the last axis copies single entries: ``span * out`` per row
    of the tensor the earlier axes have shrunk. The other axes' gathers copy whole rows.
    """
    last = axes[-1]
    if last.kind not in POOLED_KINDS:
        return 0.0
    rows = prod(a.out_size if a.kind in POOLED_KINDS else a.in_size for a in axes[:-1])
    span = window_lengths(last.in_size, last.out_size)[-1]
    return span * last.out_size * rows / prod(a.in_size for a in axes)


def _steps(family: PoolFamily, axes: tuple[AxisChoice, ...]) -> tuple[Step, ...]:
    steps: list[Step] = []
    kinds = [axis.kind for axis in axes]
    for i, axis in enumerate(axes):
        if axis.kind == "gather":
            steps.append(WindowGatherStep(i, axis.in_size, axis.out_size, axis.kernel, zero_padded=family == "avg"))
    if "pool" in kinds or "gather" in kinds:
        pooled = [a.kind in ("pool", "reduce", "gather") for a in axes]
        steps.append(
            PoolStep(
                family,
                tuple(a.kernel if p else 1 for a, p in zip(axes, pooled)),
                tuple(a.stride if p else 1 for a, p in zip(axes, pooled)),
            )
        )
        if family == "avg":
            steps += [WindowScaleStep(i, a.in_size, a.out_size, a.kernel) for i, a in enumerate(axes) if a.kind == "gather"]
    elif "reduce" in kinds:
        steps.append(ReduceStep(family, tuple(i for i, k in enumerate(kinds) if k == "reduce")))

    general = [i for i, k in enumerate(kinds) if k in ("sliding", "slices")]
    for i in _shrink_order(axes, general):
        axis = axes[i]
        if axis.kind == "sliding":
            steps.append(SlidingWindowStep(i, axis.in_size, axis.out_size, window_lengths(axis.in_size, axis.out_size)))
        else:
            steps.append(WindowSlicesStep(i, axis.in_size, axis.out_size))

    if "upsample" in kinds:
        steps.append(UpsampleStep(tuple(None if a.follows_input else a.out_size for a in axes)))
    return tuple(steps)


# --- dynamic forms: windows from the runtime size (``dynamic=True``) ---
#
# For an axis of runtime length L pooled to o, window i is [floor(i*L/o), ceil((i+1)*L/o)): every window
# holds at least L // o entries and at most L // o + 2 (:func:`window_length_range`), so a form gathers
# each window's first L // o entries unmasked and masks two more, or reads the longest window's
# bound, ceil(L/o) + 1 (:func:`longest_window_bound`), from its start, all from the runtime L by
# integer shape arithmetic (work and memory linear in the input: no (o x L) mask).
#
# Which dynamic form a pool gets, fitted like the static forms to onnxruntime on the CPU (``python -m
# model_zoo_checks.benchmarks --sections dynamic``, one exported graph run at three sizes; a loaded
# 2-core machine, so ratios of alternating medians): each window sliced from its runtime bounds
# and reduced won where the windows are few and long (PSP 64->6 over 512 channels: 2.5 ms against
# 4.6 for the gathers, 0.98x the static graph; 100x60->6: 3.0 against 4.8), the window gathers with the
# spatial axes first everywhere else (10->7 over 8x512: 2.1 against 14.8 for slices; 33->6: 0.85 against
# 1.1; 1d 1000->101, 101 windows: 0.54 against 6.2; 3d). Slicing needs the TorchScript exporter's
# tracer: under torch.export a slice's symbolic bounds add guards (its length is not 1, its end is
# within the axis) that named Dims with bounds refuse, so torch.export always gets the gathers.
DYNAMIC_SLICES_MAX_WINDOWS = 16
DYNAMIC_SLICES_MIN_LENGTH = 8
DynamicKind = Literal["gathers", "slices"]


def window_length_range(in_size: int, out_size: int) -> tuple[int, int]:
    """The fewest and the most entries a window can hold for this length: ``L // o`` and ``L // o + 2``
    (the actual windows of :func:`~fxpool.windows.window_lengths` lie within)."""
    return in_size // out_size, in_size // out_size + 2


def longest_window_bound(in_size: int, out_size: int) -> int:
    """``ceil(L / o) + 1``: no window is longer (the span a max form reads from each window's start)."""
    return (in_size + out_size - 1) // out_size + 1


@dataclass(frozen=True)
class DynamicForm:
    """How a ``dynamic=True`` replacement computes its windows from the runtime size, and why.

    ``gathers``: the spatial axes moved in front of the others (one Transpose), then per pooled axis each
    window's entries gathered by indices computed from the runtime length and reduced (sums: the window's
    first ``L // o`` entries, in two blocks of about half from 4, then the two that may lie past them, one
    per window, masked to zero; maxima: ``ceil(L/o) + 1`` entries from the start, repeating the window's
    last, in two blocks of about half, one under ONNX export); averages divide by the window sizes once, after the last axis.
    ``slices``: per pooled axis each window sliced from its runtime bounds and reduced, the results
    concatenated (under the TorchScript exporter and ``torch.jit.trace``; ``gathers`` elsewhere). Max
    windows in ONNX take a NaN flag beside their ReduceMax (the sum of the window's absolute values: NaN
    exactly where it holds one), since onnxruntime's ReduceMax skips NaN.
    """

    family: PoolFamily
    out_sizes: tuple[int | None, ...]
    kind: DynamicKind
    reason: str

    def describe(self) -> str:
        """One line for the report, e.g. ``dynamic window sums (gathers, spatial axes first) H->7, W->7``."""
        names = axis_names(len(self.out_sizes))
        axes = ", ".join(f"{n}->{o}" for n, o in zip(names, self.out_sizes) if o is not None) or "no axis pooled"
        what = "window maxima" if self.family == "max" else "window means"
        how = "slices from the runtime bounds" if self.kind == "slices" else "gathers, spatial axes first"
        return f"dynamic {what} ({how}) {axes}"


def choose_dynamic_form(family: PoolFamily, in_sizes: tuple[int, ...], out_sizes: tuple[int | None, ...]) -> DynamicForm:
    """The dynamic form for a pool first seen at ``in_sizes`` (``None`` output entries keep their size).

    >>> choose_dynamic_form("avg", (64, 64), (6, 6)).kind
    'slices'
    >>> choose_dynamic_form("max", (10, 10), (7, 7)).describe()
    'dynamic window maxima (gathers, spatial axes first) H->7, W->7'
    """
    if len(in_sizes) != len(out_sizes) or not 1 <= len(in_sizes) <= 3:
        raise ValueError(f"need 1 to 3 spatial axes with matching sizes, got {in_sizes} -> {out_sizes}")
    names = axis_names(len(in_sizes))
    pooled = [(n, i, o) for n, i, o in zip(names, in_sizes, out_sizes) if o is not None]
    many = [f"{n} {o} windows" for n, i, o in pooled if o > DYNAMIC_SLICES_MAX_WINDOWS]
    short = [f"{n} {i}->{o}: windows of {i / o:.3g}" for n, i, o in pooled if i < DYNAMIC_SLICES_MIN_LENGTH * o]
    if pooled and not many and not short:
        reason = (
            f"dynamic form: window slices (at most {DYNAMIC_SLICES_MAX_WINDOWS} windows of at least "
            f"{DYNAMIC_SLICES_MIN_LENGTH} entries per axis at {in_sizes}; gathers under torch.export)"
        )
        return DynamicForm(family, tuple(out_sizes), "slices", reason)
    why = ", ".join(many + short) or "no pooled axis"
    reason = f"dynamic form: window gathers, spatial axes first ({why} at {in_sizes})"
    return DynamicForm(family, tuple(out_sizes), "gathers", reason)
