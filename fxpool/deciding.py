"""Decide: one :class:`~fxpool.guards.PoolDecision` and one :class:`~fxpool.report.PoolRecord` per pool site."""

from __future__ import annotations

from dataclasses import dataclass, replace

from .calls import PoolCall, normalize_output_size
from .finding import PoolSite
from .guards import PoolDecision, PoolSighting, decide_pool
from .recording import PoolEvent
from .report import PoolRecord


def replacement_of(decision: PoolDecision) -> tuple[str, str]:
    """What a decision puts in a pool's place, as the report says it, and its kind."""
    plan = decision.plan
    if plan is None or decision.action == "left":
        return "left to PyTorch", ""
    if decision.action == "dynamic":
        assert decision.dynamic_form is not None
        return decision.dynamic_form.describe(), "dynamic"
    if decision.returns_indices:
        return "window argmax (values and PyTorch's indices)", "argmax"
    return plan.describe(), plan.kind


def onnx_replacement_of(decision: PoolDecision) -> str:
    """The form ONNX export runs in the replacement's place, where it has one of its own ("" elsewhere)."""
    plan = decision.plan
    if plan is None or decision.action != "exact" or not plan.onnx_steps or decision.returns_indices:
        return ""
    return plan.describe_onnx()


@dataclass(frozen=True, eq=False)
class SiteDecision:
    """What happens to one site, and the record of it."""

    site: PoolSite
    decision: PoolDecision
    record: PoolRecord

    @property
    def replaced(self) -> bool:
        return self.decision.action != "left" and bool(self.site.events) and self.site.already is None


def decide(site: PoolSite, *, dynamic: bool, undone: str | None = None) -> SiteDecision:
    """Decide one site: its own reason to stay, an earlier undo (``undone``: why), or planning's guards and rules."""
    if site.already is not None:
        decision = PoolDecision("left", "converted by an earlier fxpool.convert; kept as it is")
    elif site.left is not None:
        decision = PoolDecision("left", site.left)
    elif undone:
        decision = PoolDecision("left", undone)
    else:
        decision = decide_pool(sighting(site.call, site.events, site.location), dynamic or site.symbolic)
        if site.symbolic and not dynamic:
            decision = replace(decision, reason=decision.reason.replace("dynamic=True", "a size the graph leaves symbolic", 1))
    return SiteDecision(site, decision, _record(site, decision))


def requested_sizes(call: PoolCall, event: PoolEvent, location: str) -> tuple[int | None, ...] | None:
    """The output size per spatial axis as the model asks for it; None for a scale_factor or a computed size."""
    if call.output_size is None or call.dynamic_output_size:
        return None
    # interpolate's int size is every axis's, as a pool's output_size is
    return normalize_output_size(call.output_size, event.spatial_dims, location)


def sighting(call: PoolCall, events: tuple[PoolEvent, ...], location: str) -> PoolSighting:
    """What planning needs to know of a pool: its family, its runs' sizes and the size it asks for."""
    dims = events[0].spatial_dims if events else 0
    runs = tuple((e.input_shape[-dims:], e.output_shape[-dims:]) for e in events)
    requested = requested_sizes(call, events[0], location) if events else None
    quantized = bool(events) and events[0].quantized
    return PoolSighting(call.family, runs, requested, call.return_indices, call.dynamic_output_size, quantized)


def _record(site: PoolSite, decision: PoolDecision) -> PoolRecord:
    call, plan = site.call, decision.plan
    event = site.events[0] if site.events else None
    converted = decision.action != "left" or site.already is not None
    replacement, kind = replacement_of(decision) if site.already is None else (site.already, "already converted")
    output_size = "?" if event is None and call.output_size is None else call.requested
    if call.output_size is None and not call.dynamic_output_size and event is not None:
        output_size = f"scale_factor: {event.output_shape[-event.spatial_dims :]}"
    return PoolRecord(
        location=site.location,
        form=call.form,
        op=call.op,
        input_shape=None if event is None else event.input_shape,
        output_size=output_size,
        output_shape=None if event is None else event.output_shape,
        converted=converted,
        replacement=replacement,
        onnx_replacement="" if site.already is not None else onnx_replacement_of(decision),
        reason=decision.reason,
        size_agnostic=decision.action == "dynamic" or (plan is not None and converted and plan.size_agnostic),
        source=None if event is None else event.source,
        # an ATen node left in a graph is no call the export's translations of native pools meet
        export_translated=not converted and call.family == "avg" and call.form != "aten" and not (event and event.quantized),
        family=call.family,
        kind=kind,
        export_branch=site.export_branch,
        calls=site.call_count,
        global_output=call.asks_for_ones,
    )
