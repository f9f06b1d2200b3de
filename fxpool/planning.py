"""The choice of an exact replacement for one adaptive pool, as a pure function of sizes (no torch here).

:func:`choose_plan` tries the per-axis rules of :data:`AXIS_RULES` in order (identity, reduce, pool,
upsample, sliding, slices, gather: docs/rules.md has the table); the first that applies wins and every
earlier one says why not. Every form sums or compares only the entries of a window, so NaN and ±inf stay
in the windows that hold them (a matrix product would not: ``0 * inf`` is NaN).

Steps run in this order: one pooling over all spatial axes (or one reduction), the sliding and sliced axes,
most-shrinking first, then one upsampling. Maxima are not separable for their gradient (PyTorch's goes to the first
maximum in row-major order), so general max axes are gathered (positions padded by repeating the window's last) and
one MaxPool covers every axis at once, scanning windows as PyTorch does."""

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

# The limits between forms are fitted to onnxruntime on the CPU (``make bench``; docs/results/benchmarks.md). A general
# average axis: a stride-1 AvgPool per window length while windows are short (10->7: 2.6 ms against 4.0 for slices),
# each window sliced while they are few (64->6: 1.8 against 5.3 for gathers, and 3d pools), else gathered.
SLIDING_MAX_LENGTH = 4
SLICES_MAX_WINDOWS = 128
# The average family's window sums replace sliding AvgPools and slices in ONNX export from this many last-axis
# copies: won at 33x33->6x6 (0.198), lost at 40x40->6x6 (0.18).
WINDOW_SUMS_MIN_COPIES = 0.19
# Pools whose windows tile every pooled axis get the block form in ONNX export (:func:`onnx_block_steps`) from this
# many entries per window along the last axis, by spatial rank and family (the ``blocks`` section of ``make bench``
# times both in onnxruntime, one thread). Its pools walk each window, fast on a plane in cache; 1d and 3d averages
# run as 2d pools (:func:`~fxpool.forms.avg_pool_as_2d`). Averages' blocks won from 16 in 1d and 2d (0.30-0.98x;
# with 12 they lost 1.16-1.36x on small planes) and from 8 in 3d (0.37-0.70x; 1.5x on a 54 us pool); maxima's from
# 8 in 1d and 2d (0.50-0.95x; with 6 they lost 1.04x) and from 3 in 3d (0.30-0.95x).
BLOCK_MIN_LENGTHS: dict[tuple[int, str], int] = {
    (1, "avg"): 16,
    (1, "max"): 8,
    (2, "avg"): 16,
    (2, "max"): 8,
    (3, "avg"): 8,
    (3, "max"): 3,
}
# The limits above that send every general average axis to one exact form ("window": ONNX export's
# window sums wherever an axis is general), for the benchmark's fits and the tests of each form.
AVERAGE_FORM_LIMITS: dict[str, dict[str, float]] = {
    "sliding": {"SLIDING_MAX_LENGTH": 1 << 30, "WINDOW_SUMS_MIN_COPIES": 1 << 30},
    "slices": {"SLIDING_MAX_LENGTH": 0, "SLICES_MAX_WINDOWS": 1 << 30, "WINDOW_SUMS_MIN_COPIES": 1 << 30},
    "gather": {"SLIDING_MAX_LENGTH": 0, "SLICES_MAX_WINDOWS": 0, "WINDOW_SUMS_MIN_COPIES": 1 << 30},
    "window": {"WINDOW_SUMS_MIN_COPIES": 0},
}


@contextmanager
def forced_form(form: str) -> Iterator[None]:
    """Plan as ``form`` (a key of :data:`AVERAGE_FORM_LIMITS`) inside the block, and restore the fitted limits
    after it. Changes module state: not for concurrent planning."""
    limits = AVERAGE_FORM_LIMITS[form]
    saved = {name: globals()[name] for name in limits}
    globals().update(limits)
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
    steps, onnx_steps = _steps(family, axes), onnx_window_steps(family, axes)
    return PoolPlan(family, tuple(in_sizes), tuple(a.out_size for a in axes), axes, steps, scaled_output, onnx_steps)


def onnx_window_steps(family: PoolFamily, axes: tuple[AxisChoice, ...]) -> tuple[Step, ...]:
    """The window form ONNX export runs (values only; ``torch.export`` keeps ``steps`` for their gradient), or ``()``:
    max pools wherever an axis has general windows (MaxPool skips NaN), average pools from
    :data:`WINDOW_SUMS_MIN_COPIES`; a pool with no general axis gets :func:`onnx_block_steps`."""
    general = ("gather",) if family == "max" else ("sliding", "slices", "gather")
    if not any(axis.kind in general for axis in axes):
        return onnx_block_steps(family, axes)
    if family == "avg" and last_axis_copies(axes) < WINDOW_SUMS_MIN_COPIES:
        return ()
    lengths = {i: window_lengths(axis.in_size, axis.out_size) for i, axis in enumerate(axes) if axis.kind in POOLED_KINDS}
    pooled = list(lengths)
    steps: list[Step] = [
        WindowSlicesStep(i, a.in_size, a.out_size)
        if family == "max" and _few_long_windows(a.in_size, a.out_size)
        else WindowReduceStep(family, i, a.in_size, a.out_size, lengths[i][-1])
        for i, a in ((i, axes[i]) for i in pooled)
    ]
    if family == "avg":
        uneven = tuple(i for i in pooled if len(lengths[i]) > 1)
        windows = tuple((a.in_size, a.out_size) if i in pooled else None for i, a in enumerate(axes))
        steps = [WindowZeroStep(uneven)] * bool(uneven) + steps + [WindowCountStep(windows)]
    # Spatial axes first, every gather copying whole rows: with the max family's NaN flag that won on every max case
    # of make bench at 1 thread (1.19-5.3x the input layout's speed, 2026-12-07) and on all but 4x8->6x16 at 2 (0.94).
    steps = [SpatialLayoutStep(True), *steps, SpatialLayoutStep(False)]
    if any(axis.kind == "upsample" for axis in axes):
        steps.append(UpsampleStep(tuple(None if axis.follows_input else axis.out_size for axis in axes)))
    return tuple(steps)


def onnx_block_steps(family: PoolFamily, axes: tuple[AxisChoice, ...]) -> tuple[Step, ...]:
    """The block form ONNX export runs for a pool whose windows tile every pooled axis, where the last axis's
    windows hold at least :data:`BLOCK_MIN_LENGTHS` entries, or ``()``."""
    if any(a.kind not in ("identity", "pool", "reduce") for a in axes) or not any(a.kind == "pool" for a in axes):
        return ()
    if any(a.kind == "pool" and a.kernel != a.stride for a in axes):
        return ()  # overlapping windows
    last = axes[-1]
    if last.kind == "identity" or last.kernel < BLOCK_MIN_LENGTHS[len(axes), family]:
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

    In the input's layout a gather along the last axis copies single entries: ``span * out`` per row of the tensor the
    earlier axes have shrunk. The other axes' gathers copy whole rows."""
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
    for i in sorted(general, key=lambda a: (axes[a].out_size / axes[a].in_size, a)):  # most-shrinking first: later steps read less
        axis = axes[i]
        if axis.kind == "sliding":
            steps.append(SlidingWindowStep(i, axis.in_size, axis.out_size, window_lengths(axis.in_size, axis.out_size)))
        else:
            steps.append(WindowSlicesStep(i, axis.in_size, axis.out_size))

    if "upsample" in kinds:
        steps.append(UpsampleStep(tuple(None if a.follows_input else a.out_size for a in axes)))
    return tuple(steps)


# --- dynamic forms: windows from the runtime size (``dynamic=True``) ---
# Slicing each window from its runtime bounds won where windows are few and long (PSP 64->6 over 512 channels:
# 1.7 ms against 2.9 for the gathers, 2026-12-07), the gathers everywhere else (10->7 over 8x512: 2.1 against 14.8).
# Under torch.export slices' symbolic bounds add guards that named Dims refuse: torch.export always gets gathers.
DYNAMIC_SLICES_MAX_WINDOWS = 16
DYNAMIC_SLICES_MIN_LENGTH = 8


def _few_long_windows(in_size: int, out_size: int) -> bool:
    """Few long windows: slices win for max pools in ONNX export too (flagged PSP 64->6 max: 2.8 ms against 5.5)."""
    return out_size <= DYNAMIC_SLICES_MAX_WINDOWS and in_size >= DYNAMIC_SLICES_MIN_LENGTH * out_size


DynamicKind = Literal["gathers", "slices"]


@dataclass(frozen=True)
class DynamicForm:
    """How a ``dynamic=True`` replacement (:mod:`fxpool.dynamic`) computes its windows from the runtime size,
    and why: ``gathers`` (spatial axes first, each window's entries gathered) or ``slices`` (each window sliced
    from its runtime bounds; under the TorchScript exporter and ``torch.jit.trace``, ``gathers`` elsewhere)."""

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
