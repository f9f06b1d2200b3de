"""A replacement plan's data: one :class:`AxisChoice` per spatial axis and the ordered steps (:data:`Step`) that
compute the pool (``onnx_steps`` where ONNX export runs a form of its own). Plain frozen dataclasses, no torch:
:mod:`fxpool.planning` makes them; the replacements and the exporter translations run them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

PoolFamily = Literal["avg", "max"]
AxisKind = Literal["identity", "reduce", "pool", "upsample", "sliding", "slices", "gather"]

# The max family's window maxima take one gather per window position and an elementwise Max: past this many
# positions the exporters spend minutes on the ops (1,000,000 -> 997: 108 s), so the positions are gathered as one
# (o, span) block reduced by one ReduceMax, with a NaN flag beside it (onnxruntime's ReduceMax skips NaN).
WINDOW_MAXIMA_MAX_GATHERS = 32


def axis_names(spatial_dims: int) -> tuple[str, ...]:
    """Conventional names of the spatial axes: L; H, W; D, H, W."""
    return {1: ("L",), 2: ("H", "W"), 3: ("D", "H", "W")}[spatial_dims]


@dataclass(frozen=True)
class AxisChoice:
    """How one spatial axis is pooled, and why."""

    kind: AxisKind
    in_size: int
    out_size: int
    reason: str
    kernel: int = 1
    stride: int = 1
    factor: int = 1
    follows_input: bool = False
    rejected: tuple[str, ...] = ()  # why each rule before this one did not apply ("pool: ...")


@dataclass(frozen=True)
class PoolStep:
    """One AvgPool/MaxPool over all spatial axes (kernel 1, stride 1 on axes it leaves alone)."""

    family: PoolFamily
    kernel: tuple[int, ...]
    stride: tuple[int, ...]


@dataclass(frozen=True)
class ReduceStep:
    """Mean (avg) or amax (max) over some spatial axes, keeping them as size 1."""

    family: PoolFamily
    axes: tuple[int, ...]


@dataclass(frozen=True)
class SlidingWindowStep:
    """Average one axis by a stride-1 AvgPool per window length (concatenated, shortest first), then
    gather each window's start in its length's block (:func:`~fxpool.forms.sliding_window_indices`)."""

    axis: int
    in_size: int
    out_size: int
    lengths: tuple[int, ...]


@dataclass(frozen=True)
class WindowSlicesStep:
    """Average one axis window by window: slice each window, take its mean, concatenate the means."""

    axis: int
    in_size: int
    out_size: int


@dataclass(frozen=True)
class WindowGatherStep:
    """Copy out each window's positions along one axis, padded to ``span`` for a pool of kernel and stride ``span``:
    max by repeating the window's last position; average (``zero_padded``) with a zero (see :class:`WindowScaleStep`)."""

    axis: int
    in_size: int
    out_size: int
    span: int
    zero_padded: bool = False


@dataclass(frozen=True)
class WindowReduceStep:
    """Each window's maximum (max) or sum (avg) along one axis, from constant-index gathers (ONNX only). Max: gather
    ``j`` takes position ``j`` of every window (a shorter window repeats its last), then the elementwise Max, which
    propagates NaN. Average: one gather of every window's positions (a shorter window's missing ones point at
    :class:`WindowZeroStep`'s zero), summed over the span; :class:`WindowCountStep` divides after the last axis."""

    family: PoolFamily
    axis: int
    in_size: int
    out_size: int
    span: int


@dataclass(frozen=True)
class BlockReduceStep:
    """Each window's sum (avg) or maximum (max) along one axis that ``out_size`` windows tile: a Reshape to
    ``(out_size, length)`` and one reduction (ReduceMax skips NaN in onnxruntime, as the MaxPool it replaces)."""

    family: PoolFamily
    axis: int
    in_size: int
    out_size: int


@dataclass(frozen=True)
class WindowZeroStep:
    """Append one zero to each of ``axes``: the entry a shorter window's missing positions gather, so
    that its sum over the span is its own sum (a zero, not a product: NaN and ±inf stay in their windows)."""

    axes: tuple[int, ...]


@dataclass(frozen=True)
class WindowCountStep:
    """Divide every output by the number of entries in its window: the product over the spatial axes of
    its window lengths along each pooled axis (``(in_size, out_size)``; ``None``: an axis not pooled)."""

    windows: tuple[tuple[int, int] | None, ...]


@dataclass(frozen=True)
class SpatialLayoutStep:
    """Move the spatial axes in front of the batch and channel axes (``spatial_first``), or back after:
    in front, a gather along a spatial axis copies whole blocks. Steps between the two name their axis as ever."""

    spatial_first: bool


@dataclass(frozen=True)
class WindowScaleStep:
    """Multiply output ``i`` along one axis by ``span / length_i`` (after a zero-padded gather and AvgPool)."""

    axis: int
    in_size: int
    out_size: int
    span: int


@dataclass(frozen=True)
class UpsampleStep:
    """Nearest upsampling of every spatial axis to ``sizes`` (integer factors; ``None``: the input's, read at run time)."""

    sizes: tuple[int | None, ...]


Step = (
    PoolStep
    | ReduceStep
    | SlidingWindowStep
    | WindowSlicesStep
    | WindowGatherStep
    | WindowReduceStep
    | BlockReduceStep
    | WindowZeroStep
    | WindowCountStep
    | SpatialLayoutStep
    | WindowScaleStep
    | UpsampleStep
)


@dataclass(frozen=True)
class PoolPlan:
    """The exact replacement of one adaptive pool: per-axis choices and the steps that compute it."""

    family: PoolFamily
    in_sizes: tuple[int, ...]
    out_sizes: tuple[int, ...]
    axes: tuple[AxisChoice, ...]
    steps: tuple[Step, ...]
    scaled_output: bool = False  # the output size derives from the input's (interpolate's scale_factor)
    # What ONNX export runs instead of ``steps`` (forward values only; empty: ``steps``). See :func:`onnx_window_steps`.
    onnx_steps: tuple[Step, ...] = ()

    @property
    def spatial_dims(self) -> int:
        return len(self.in_sizes)

    @property
    def guarded_axes(self) -> tuple[int, ...]:
        """Spatial axes whose traced size the replacement depends on: all where the output size is a scale of the
        input's; else those neither following their input (``None`` in output_size) nor reduced by a mean/max
        that does not name their length (an output-1 axis folded into a pooling kernel does)."""
        if self.scaled_output:
            return tuple(range(self.spatial_dims))
        folded = any(isinstance(step, PoolStep) for step in self.steps)
        return tuple(i for i, axis in enumerate(self.axes) if not (axis.follows_input or (axis.kind == "reduce" and not folded)))

    @property
    def size_agnostic(self) -> bool:
        """True where the replacement is exact at every input size, so it needs no size guard."""
        return not self.guarded_axes

    @property
    def kind(self) -> str:
        """The name of the first step's op (``identity`` for none), as reports count replacements. Planning's steps
        begin with one of these (the ONNX-only steps and the scaling after a pool never come first)."""
        if not self.steps:
            return "identity"
        step = self.steps[0]
        if isinstance(step, PoolStep):
            return f"{'AvgPool' if step.family == 'avg' else 'MaxPool'}{self.spatial_dims}d"
        if isinstance(step, ReduceStep):
            return "mean" if step.family == "avg" else "amax"
        names = {SlidingWindowStep: "sliding", WindowSlicesStep: "slices", WindowGatherStep: "gather", UpsampleStep: "nearest"}
        return names[type(step)]

    def describe(self) -> str:
        """A one-line human summary of the steps, e.g. ``AvgPool2d(k=(3, 3), s=(2, 2))``."""
        return " -> ".join(_describe_step(step, self.spatial_dims) for step in self.steps) or "identity"

    def describe_onnx(self) -> str:
        """:meth:`describe` of what ONNX export runs (:attr:`onnx_steps`, else ``steps``)."""
        return " -> ".join(_describe_step(step, self.spatial_dims) for step in self.onnx_steps) or self.describe()

    def reasons(self) -> str:
        """Why each axis got its kind, one clause per axis."""
        names = axis_names(self.spatial_dims)
        return "; ".join(f"{name} {axis.reason}" for name, axis in zip(names, self.axes))


def _describe_step(step: Step, spatial_dims: int) -> str:
    names = axis_names(spatial_dims)
    if isinstance(step, PoolStep):
        op = "AvgPool" if step.family == "avg" else "MaxPool"
        return f"{op}{spatial_dims}d(k={_fmt(step.kernel)}, s={_fmt(step.stride)})"
    if isinstance(step, ReduceStep):
        op = "mean" if step.family == "avg" else "amax"
        return f"{op}({','.join(names[a] for a in step.axes)})"
    if isinstance(step, SlidingWindowStep):
        lengths = ",".join(map(str, step.lengths))
        return f"sliding {names[step.axis]} {step.in_size}->{step.out_size} (k={lengths})"
    if isinstance(step, WindowSlicesStep):
        return f"slices {names[step.axis]} {step.in_size}->{step.out_size}"
    if isinstance(step, WindowGatherStep):
        padding = ", zero-padded" if step.zero_padded else ""
        return f"gather {names[step.axis]} {step.in_size}->{step.out_size}x{step.span}{padding}"
    if isinstance(step, WindowReduceStep):
        if step.family == "max":
            if step.span > WINDOW_MAXIMA_MAX_GATHERS:
                return f"window-max {names[step.axis]} {step.in_size}->{step.out_size} (one gather of {step.span}, ReduceMax)"
            return f"window-max {names[step.axis]} {step.in_size}->{step.out_size} ({step.span} gathers, Max)"
        return f"window-sum {names[step.axis]} {step.in_size}->{step.out_size} (span {step.span})"
    if isinstance(step, BlockReduceStep):
        op = "max" if step.family == "max" else "sum"
        return f"block-{op} {names[step.axis]} {step.in_size}->{step.out_size} (k={step.in_size // step.out_size})"
    if isinstance(step, WindowZeroStep):
        return f"zero after {','.join(names[a] for a in step.axes)}"
    if isinstance(step, WindowCountStep):
        return "divide by window sizes"
    if isinstance(step, SpatialLayoutStep):
        return "spatial axes first" if step.spatial_first else "spatial axes back"
    if isinstance(step, WindowScaleStep):
        return f"scale {names[step.axis]} by {step.span}/window length"
    return f"nearest upsample to {_fmt(step.sizes)}"


def _fmt(values: tuple[int | None, ...]) -> str:
    return str(values[0]) if len(values) == 1 else str(values)
