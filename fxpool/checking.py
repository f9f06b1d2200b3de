"""The self-check: the converted model run once on the example, against what the original computed.

Each replacement against the native pool on its own input (max family bit-equal), the whole model against the original
(and its export branch). Where only the whole model differs, :func:`rounding_noise` measures the original's own
sensitivity to rounding (TF32 downstream), and :meth:`SelfCheck.within_noise` accepts a multiple of it."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, replace
from typing import Any, Literal

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

from .calls import describe_function, is_pool_function
from .copying import structural_copy, tree_modules
from .errors import error_summary
from .example import Example, example_run
from .globalstate import export_flag
from .replacements import native_pool, native_pool_function

# Largest |converted - original| allowed, relative to the compared tensor's largest magnitude (at least 1): each
# pool is exact up to the order of its sums, so these are rounding bounds with room for later layers' amplification.
TOLERANCE = {torch.float64: 1e-10, torch.float32: 1e-5, torch.float16: 1e-2, torch.bfloat16: 5e-2}
_DEFAULT_TOLERANCE = 1e-5
# How far beyond the model's own sensitivity to rounding (rounding_noise: pool outputs nudged by ULPS_NUDGED units in
# the last place, more than most replacements differ) the whole-model outputs may differ.
NOISE_FACTOR = 8.0
ULPS_NUDGED = 2

CheckStatus = Literal["passed", "failed", "skipped", "inconclusive"]


@dataclass(frozen=True)
class ReplacementCheck:
    """One replacement's output against the native pool on the same input."""

    location: str
    max_error: float
    tolerance: float  # 0.0: must be bit-equal (max family)

    @property
    def passed(self) -> bool:
        return self.max_error <= self.tolerance


@dataclass(frozen=True)
class SelfCheck:
    """What the self-check compared and found."""

    status: CheckStatus
    compared: str  # in words
    output_error: float | None = None  # largest |converted - original| over the model's outputs
    output_tolerance: float | None = None  # the bound it was held to (absolute)
    replacements: tuple[ReplacementCheck, ...] = ()
    mismatch: str | None = None  # why the whole-model outputs disagree, in words
    actions: tuple[str, ...] = ()  # what convert undid to pass, in order
    noise: float | None = None  # how far the original's outputs move when its pools' outputs are nudged

    @property
    def failed_replacements(self) -> tuple[ReplacementCheck, ...]:
        return tuple(r for r in self.replacements if not r.passed)

    def summary(self) -> str:
        if self.status == "skipped":
            return f"self-check skipped: {self.compared}"
        worst = max((r.max_error for r in self.replacements), default=0.0)
        parts = [f"self-check {self.status}: {self.compared}"]
        if self.output_error is not None:
            parts.append(f"outputs differ by at most {self.output_error:.3g} (allowed {self.output_tolerance:.3g})")
        if self.noise is not None:
            parts.append(
                f"beyond the fixed bound but within {NOISE_FACTOR:g}x the original's own sensitivity to rounding on this "
                f"device: its outputs move by {self.noise:.3g} when its pools' outputs move by {ULPS_NUDGED} units in the "
                f"last place (TF32 or reduced-precision arithmetic downstream)"
            )
        if self.replacements:
            parts.append(f"{len(self.replacements)} replacement(s) against the native pool, worst {worst:.3g}")
        if self.mismatch:
            parts.append(self.mismatch)
        return "; ".join(parts) + "".join(f"\n  undone: {action}" for action in self.actions)

    def within_noise(self, noise: Noise) -> SelfCheck | None:
        """This check passed where its outputs differ by no more than the original's own rounding noise, else None;
        only a numeric difference qualifies (not another structure or shape), and only where every replacement agreed."""
        error = self.output_error
        if self.status != "failed" or self.failed_replacements or error is None or error == float("inf"):
            return None
        if not noise.deterministic or error > NOISE_FACTOR * noise.nudged:
            return None
        return replace(self, status="passed", mismatch=None, noise=noise.nudged)


@dataclass(frozen=True)
class Noise:
    """The original's own noise: whether a second run repeats its outputs, and how far they move when its pools'
    outputs are nudged by :data:`ULPS_NUDGED` units in the last place."""

    deterministic: bool
    nudged: float


def rounding_noise(model: nn.Module, example: Example, reference: Any) -> Noise:
    """The original (a copy, buffers cloned) run twice more against ``reference``: as it is, and with every
    adaptive pool's output nudged (alternating signs, a fixed pattern)."""
    again, raised = _run(structural_copy(model), example, contextlib.nullcontext())
    nudged, raised_nudged = _run(structural_copy(model), example, _PoolOutputsNudged())
    deterministic = raised is None and compare_outputs(again, reference)[0] is None
    return Noise(deterministic, float("inf") if raised_nudged is not None else compare_outputs(nudged, reference)[1])


def _run(model: nn.Module, example: Example, mode: contextlib.AbstractContextManager[Any]) -> tuple[Any, str | None]:
    """``model``'s output on the example, run without side effects, or what it raised, in words."""
    with isolated_run(model, example), mode:
        try:
            return example.call(model), None
        except Exception as raised:
            return None, f"it raised {error_summary(raised)}"


@contextlib.contextmanager
def isolated_run(model: nn.Module, example: Example) -> Iterator[None]:
    """A run of ``model`` (fxpool's copy) on ``example`` that leaves no trace: :func:`example_run`'s rules, stderr
    held back (a GraphModule that raises prints its code there), and the buffers the copy shares with the caller's
    model (batch-norm statistics) replaced by clones until the run ends, in place, for a graph sharing the dict."""
    saved: dict[int, tuple[dict[str, Any], dict[str, Any]]] = {}
    for module in tree_modules(model):
        buffers = module._buffers
        if buffers and id(buffers) not in saved:
            saved[id(buffers)] = (buffers, dict(buffers))
            for name, tensor in buffers.items():
                if tensor is not None:
                    buffers[name] = tensor.detach().clone()
    try:
        with example_run(example), contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        for buffers, originals in saved.values():
            buffers.update(originals)


class _PoolOutputsNudged(TorchFunctionMode):
    """Every adaptive pool's output (values, for max pools with indices) times 1 ± k·eps, in a fixed pattern."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        output = func(*args, **kwargs)
        if not is_pool_function(func) or describe_function(func, args, kwargs) is None:
            return output
        if isinstance(output, tuple):
            return (_nudged(output[0]),) + tuple(output[1:])
        return _nudged(output)


def _nudged(values: Any) -> Any:
    if not isinstance(values, torch.Tensor) or not values.is_floating_point() or not values.numel():
        return values
    signs = torch.ones(values.numel(), dtype=values.dtype, device=values.device)
    signs[1::2] = -1
    step = ULPS_NUDGED * torch.finfo(values.dtype).eps
    return values * (1 + step * signs.reshape(values.shape))


def self_check(converted: nn.Module, example: Example, reference: Any, export_reference: Any = None) -> SelfCheck:
    """Run ``converted`` on ``example`` without side effects and compare it with ``reference``; with
    ``export_reference`` (the original's output with ``torch.onnx.is_in_onnx_export()`` true), in that mode too."""
    if example.on_meta:
        return SelfCheck("skipped", "the example input is on the meta device, which holds no values")
    eager = _check_run(converted, example, reference, export=False)
    if export_reference is None:
        return eager
    export = _check_run(converted, example, export_reference, export=True)
    worst: dict[str, ReplacementCheck] = {}
    for check in eager.replacements + export.replacements:
        if check.location not in worst or check.max_error > worst[check.location].max_error:
            worst[check.location] = check
    mismatch = "; ".join(m for m in (eager.mismatch, export.mismatch and f"with the export flag: {export.mismatch}") if m)
    errors = [(c.output_error, c.output_tolerance) for c in (eager, export) if c.output_error is not None]
    error, bound = max(errors, key=lambda pair: pair[0]) if errors else (None, None)
    status: CheckStatus = "failed" if "failed" in (eager.status, export.status) else "passed"
    compared = eager.compared + ", in eager and with torch.onnx.is_in_onnx_export() true (the ONNX exporters' branch)"
    return SelfCheck(status, compared, error, bound, tuple(worst.values()), mismatch or None)


def _check_run(converted: nn.Module, example: Example, reference: Any, export: bool) -> SelfCheck:
    checks: list[ReplacementCheck] = []
    with ExitStack() as stack:
        for module in tree_modules(converted):
            if hasattr(module, "fxpool_native_reference"):
                stack.enter_context(module.register_forward_hook(_replacement_hook(checks), prepend=True))
        output, raised = _run(converted, example, export_flag(export))
    if raised is not None:  # the converted model failing where the original ran
        return SelfCheck("failed", "the converted model on the example input", replacements=tuple(checks), mismatch=raised)
    mismatch, error, bound = compare_outputs(output, reference)
    status: CheckStatus = "failed" if mismatch or any(not c.passed for c in checks) else "passed"
    compared = "the converted model on the example input against the original's output"
    return SelfCheck(status, compared, error, bound, tuple(checks), mismatch)


def _replacement_hook(checks: list[ReplacementCheck]):
    def hook(module: Any, inputs: tuple[Any, ...], output: Any) -> None:  # an ExactAdaptivePool or a WindowArgmaxPool
        family, out_sizes = module.fxpool_native_reference
        x = inputs[0]
        if getattr(module, "returns_indices", False):
            checks.append(_indices_check(module, x, output, out_sizes))
            return
        if not isinstance(x, torch.Tensor) or not isinstance(output, torch.Tensor):
            return
        outputs = [output]
        try:  # raising: the replacement was built for another input than it gets, so it is wrong
            expected = native_pool(x, family, out_sizes)
            if getattr(module, "runs_native_in_eager", False):  # prove the forms exporters will see as well
                outputs.append(module.traced_form(x))
                if getattr(getattr(module, "plan", None), "onnx_steps", ()):  # and ONNX export's own
                    outputs.append(module.onnx_form(x))
        except Exception:
            checks.append(_exact_check(module.location, False))
        else:
            if family == "max":
                checks.append(_exact_check(module.location, all(_bit_equal(o, expected) for o in outputs)))
            else:
                errors = [_tensor_error(o, expected) for o in outputs]
                checks.append(ReplacementCheck(module.location, max(e for e, _ in errors), errors[0][1]))

    return hook


def _indices_check(module: Any, x: Any, output: Any, out_sizes: tuple[int | None, ...]) -> ReplacementCheck:
    """A max pool with indices against PyTorch's: values and indices equal, in eager and in the traced form."""
    try:
        expected = native_pool_function("max", len(out_sizes))(x, list(out_sizes), return_indices=True)
        outputs = [output, module.traced_form(x)]
    except Exception:
        return _exact_check(module.location, False)
    same = all(
        isinstance(o, tuple) and len(o) == 2 and torch.equal(o[1], expected[1]) and _bit_equal(o[0], expected[0]) for o in outputs
    )
    return _exact_check(module.location, same)


def _bit_equal(ours: torch.Tensor, theirs: torch.Tensor) -> bool:
    """Same shape, NaN in the same places, every other value equal."""
    if ours.shape != theirs.shape or not torch.equal(ours.isnan(), theirs.isnan()):
        return False
    return bool((ours.nan_to_num() == theirs.nan_to_num()).all())


def _exact_check(location: str, same: bool) -> ReplacementCheck:
    """The check of a replacement that must be bit-equal (or that failed to run: ``same`` False)."""
    return ReplacementCheck(location, 0.0 if same else float("inf"), 0.0)


def compare_outputs(ours: Any, theirs: Any) -> tuple[str | None, float, float]:
    """``(why they differ or None, largest absolute error, its allowed bound)`` over matching leaves."""
    our_leaves, our_spec = tree_flatten(ours)
    their_leaves, their_spec = tree_flatten(theirs)
    if our_spec != their_spec:
        return f"the outputs have different structures ({our_spec} against {their_spec})", float("inf"), 0.0
    worst, worst_bound = 0.0, 0.0
    for index, (a, b) in enumerate(zip(our_leaves, their_leaves)):
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
            if a.shape != b.shape or a.dtype != b.dtype:
                why = f"output {index} is {a.dtype} {tuple(a.shape)} but the original gives {b.dtype} {tuple(b.shape)}"
                return why, float("inf"), 0.0
            error, bound = _tensor_error(a, b)
            if error > bound:
                return f"output {index} differs by {error:.3g} (allowed {bound:.3g})", error, bound
            if error >= worst:
                worst, worst_bound = error, bound
        elif type(a) is not type(b) or not _plain_equal(a, b):
            return f"output {index} is {a!r} but the original gives {b!r}", float("inf"), 0.0
    return None, worst, worst_bound


def _tensor_error(ours: torch.Tensor, theirs: torch.Tensor) -> tuple[float, float]:
    """Largest absolute difference (NaN where both are NaN counts as equal) and its allowed bound."""
    if ours.shape != theirs.shape:
        return float("inf"), 0.0
    if not theirs.numel():
        return 0.0, 0.0
    if not (theirs.is_floating_point() or theirs.is_complex()):
        return (0.0 if torch.equal(ours, theirs) else float("inf")), 0.0
    a, b = ours.detach().double(), theirs.detach().double()
    same = (a == b) | (a.isnan() & b.isnan())  # equal infinities and NaN against NaN count as equal
    diff = (a - b).abs().masked_fill(same, 0.0).nan_to_num(nan=float("inf"))
    finite = b.masked_fill(~b.isfinite(), 0.0).abs()
    scale = max(1.0, finite.max().item())
    return diff.max().item(), TOLERANCE.get(theirs.dtype, _DEFAULT_TOLERANCE) * scale


def _plain_equal(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:  # objects whose == raises or is ambiguous
        return a is b
