"""torch.export programs: every ATen-level adaptive pool replaced by fxpool's exact forms.

``fxpool.convert(exported_program)`` comes here (:func:`convert_program`), and so does
``fxpool.convert(graph_module, x)`` for a ``GraphModule`` whose graph calls the ATen pool operators
(:func:`has_aten_pools`; ``ExportedProgram.module()`` gives one) (:func:`convert_aten_graph`). The
pass, on a copy of the graph (the caller's program or module is never changed):

1. **find** (:func:`find_aten_pools`): every node calling an operator of
   :data:`~fxpool.calls.ATEN_FORMS`, as an :class:`AtenPoolSite`. It stays where it is when the graph
   uses a max pool's indices, computes its output size at run time, or sits in a control-flow branch
   (a ``torch.cond`` subgraph); the report says why.
2. **record**: a copy of the graph runs the example with each pool node calling a probe that records
   its input and its native result (the program's own example inputs, or random inputs of its
   example shapes).
3. **decide and build**: planning's one decision per node from the sizes seen
   (:func:`~fxpool.guards.decide_pool`; a spatial size the program leaves symbolic asks for the
   dynamic-size form of :mod:`fxpool.dynamic`), and the replacement module
   (:class:`~fxpool.replacements.ExactAdaptivePool`, or the dynamic form) called in the node's place.
4. **check**: each replacement against its node's native result on the recorded input (average pools
   within the self-check's tolerance, max pools bit-equal), then the whole graph against the
   original's outputs; any mismatch raises :class:`~fxpool.errors.SelfCheckError` naming the node
   and the shapes.
5. **re-export** (programs only): ``torch.export.export`` of the rewritten module with the program's
   own dynamic dimensions, so the new program keeps the signature (inputs, outputs, parameter and
   buffer names) and state of the original, and holds only ATen operators: no fxpool code, no custom
   op, nothing to compile. A program that was run through ``run_decompositions`` (ATen dialect) gets
   the default decompositions of the operators the replacements added, and of no other. The new
   program is run once more on the example against the original.

Every pool node gets a :class:`~fxpool.report.PoolRecord` (``form="aten"``, located as
``<program>:NODE`` or ``<graph>:NODE``).
"""

from __future__ import annotations

import copy
import operator
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import fx, nn
from torch.export import ExportedProgram
from torch.utils._pytree import tree_leaves

from .calls import PoolCall, aten_returns_indices, describe_aten, is_aten_pool
from .checking import ReplacementCheck, SelfCheck, compare_outputs
from .copying import structural_copy
from .deciding import onnx_replacement_of, replacement_of
from .dynamic import DynamicAdaptiveAvgPool, DynamicAdaptiveMaxPool
from .errors import ExampleInputError, FxpoolError, SelfCheckError
from .example import Example, example_run, read_example
from .globalstate import LOCK
from .guards import PoolDecision, PoolSighting, decide_pool
from .replacements import ExactAdaptivePool
from .report import ConversionReport, PoolRecord

PROGRAM_SCOPE = "<program>"
GRAPH_SCOPE = "<graph>"
REPLACEMENT_PREFIX = "fxpool_pool_"  # the replacement modules' attribute names in the rewritten graph module


@dataclass(frozen=True, eq=False)
class AtenPoolSite:
    """One ATen pool node, how it is called, and why it must stay where it is (``left``)."""

    node: fx.Node
    call: PoolCall
    location: str
    requested: tuple[int | None, ...] | None  # per spatial axis; None entries keep the input's size
    symbolic: bool  # a spatial size of its input is symbolic in the graph: the dynamic-size form
    left: str | None = None
    values: fx.Node | None = None  # a max pool's ``getitem(node, 0)``: where its values are read
    shapes: tuple[tuple[int, ...] | None, tuple[int, ...] | None] = (None, None)  # from the graph, for the report


@dataclass(frozen=True)
class _Seen:
    """What the probe recorded for one pool node on the example."""

    input: torch.Tensor
    output: torch.Tensor


def has_aten_pools(module: Any) -> bool:
    """True for a ``GraphModule`` whose graph (or a subgraph of it) calls an ATen adaptive pool operator."""
    if not isinstance(module, fx.GraphModule):
        return False
    return any(
        node.op == "call_function" and is_aten_pool(node.target)
        for sub in module.modules()
        if isinstance(sub, fx.GraphModule)
        for node in sub.graph.nodes
    )


def find_aten_pools(gm: fx.GraphModule, scope: str) -> list[AtenPoolSite]:
    """Every ATen pool node of ``gm``'s graph and of its subgraphs (those are left: control-flow branches)."""
    sites: list[AtenPoolSite] = []
    for node in gm.graph.nodes:
        if node.op == "call_function" and is_aten_pool(node.target):
            sites.append(_site(node, f"{scope}:{node.name}"))
    for name, sub in gm.named_modules():
        if sub is gm or not isinstance(sub, fx.GraphModule):
            continue
        for node in sub.graph.nodes:
            if node.op == "call_function" and is_aten_pool(node.target):
                described = describe_aten(node.target, node.args, dict(node.kwargs))
                assert described is not None
                why = (
                    f"inside the subgraph {name!r} (a torch.cond/while_loop branch or another higher-order op), "
                    f"which fxpool does not rewrite; export the model with that branch taken, or convert the "
                    f"nn.Module before torch.export"
                )
                sites.append(AtenPoolSite(node, described[0], f"{scope}:{name}.{node.name}", None, False, why))
    return sites


def _site(node: fx.Node, location: str) -> AtenPoolSite:
    described = describe_aten(node.target, node.args, dict(node.kwargs))
    assert described is not None
    call, source = described
    dims = call.spatial_dims
    assert dims is not None
    fake_in = source.meta.get("val") if isinstance(source, fx.Node) else None
    fake_out = node.meta.get("val")
    if isinstance(fake_out, (tuple, list)):
        fake_out = fake_out[0]
    in_sizes = tuple(fake_in.shape[-dims:]) if isinstance(fake_in, torch.Tensor) else None
    symbolic = in_sizes is not None and not all(isinstance(s, int) for s in in_sizes)
    requested, left = _requested(node, call, in_sizes, fake_out)
    values = None
    if aten_returns_indices(node.target) and left is None:
        values, left = _values_of(node)
    return AtenPoolSite(
        node, call, location, requested, symbolic, left, values, (_example_shape(fake_in), _example_shape(fake_out))
    )


def _example_shape(fake: Any) -> tuple[int, ...] | None:
    """A graph value's shape at the example (a symbolic size at its example value), None where unknown."""
    if not isinstance(fake, torch.Tensor):
        return None
    sizes = [s if isinstance(s, int) else s.node.hint for s in fake.shape]
    return None if any(s is None for s in sizes) else tuple(int(s) for s in sizes)


def _requested(
    node: fx.Node, call: PoolCall, in_sizes: tuple[Any, ...] | None, fake_out: Any
) -> tuple[tuple[int | None, ...] | None, str | None]:
    """The output size per axis; a symbolic entry equal to the input's own size is ``None`` (kept)."""
    if not call.dynamic_output_size:
        return call.output_size, None
    dims = call.spatial_dims
    assert dims is not None
    sizes = node.args[1] if len(node.args) > 1 else node.kwargs.get("output_size")
    out_sizes = tuple(fake_out.shape[-dims:]) if isinstance(fake_out, torch.Tensor) else None
    if in_sizes is None or out_sizes is None or not isinstance(sizes, (list, tuple)) or len(sizes) != dims:
        return None, "output_size is computed at run time, so no fixed replacement is safe"
    requested: list[int | None] = []
    for size, size_in, size_out in zip(sizes, in_sizes, out_sizes):
        if isinstance(size, int):
            requested.append(size)
        elif _same_size(size_in, size_out):
            requested.append(None)  # output_size None on a symbolic axis: the input's own size
        else:
            return None, "output_size is computed at run time, so no fixed replacement is safe"
    return tuple(requested), None


def _same_size(a: Any, b: Any) -> bool:
    if isinstance(a, torch.SymInt) and isinstance(b, torch.SymInt):
        return bool(a.node.expr == b.node.expr)
    return False


def _values_of(node: fx.Node) -> tuple[fx.Node | None, str | None]:
    """A max pool node's ``getitem(node, 0)``, or why it must stay (its indices are used)."""
    values: fx.Node | None = None
    for user in node.users:
        index = user.args[1] if user.op == "call_function" and len(user.args) == 2 else None
        if user.target is not operator.getitem or index not in (0, 1):
            return None, f"its (values, indices) result is used whole by {user.format_node()}"
        if index == 1 and user.users:
            readers = ", ".join(u.name for u in user.users)
            return None, f"the graph uses its indices (read by {readers}): PyTorch's argmax indices are not reproduced"
        if index == 0 and user.users:
            values = user
    if values is None:
        return None, "its values are never read"
    return values, None


def convert_aten_graph(
    gm: fx.GraphModule, example: Example, scope: str = GRAPH_SCOPE, *, dynamic: bool = False
) -> tuple[fx.GraphModule, ConversionReport]:
    """A copy of ``gm`` with every ATen pool node it can replace calling fxpool's exact form, and the report.

    The copy shares ``gm``'s parameters and buffers; its own graph holds ``call_module`` nodes to the
    replacements (attributes ``fxpool_pool_N``). Raises :class:`~fxpool.errors.SelfCheckError` where a
    replacement or the whole graph differs from the original on ``example``. ``dynamic`` is
    ``fxpool.convert``'s (a symbolic spatial size asks for the dynamic form anyway).
    """
    with LOCK:
        sites = find_aten_pools(gm, scope)
        live = [site for site in sites if site.left is None]
        seen, reference = _record(gm, live, example)
        decisions = {site.location: _decide(site, seen.get(site.location), dynamic) for site in sites}
        work = _graph_copy(gm)
        replaced = _rewrite(work, gm, sites, decisions, seen)
        checks = tuple(_check_replacement(replaced[s.location], s, seen[s.location]) for s in live if s.location in replaced)
        check = _check_whole(work, example, reference, checks, "the rewritten graph") if replaced else _unchanged(sites)
    records = tuple(_record_of(site, decisions[site.location], seen.get(site.location)) for site in sites)
    return work, ConversionReport(records, check=check)


def convert_program(
    program: ExportedProgram, example: Example | None = None, *, dynamic: bool = False
) -> tuple[ExportedProgram, ConversionReport]:
    """A new program with every ATen pool it can replace in fxpool's exact form, and the report.

    ``example`` defaults to the program's own example inputs (``program.example_inputs``), or random
    inputs of its example shapes where it has none. The program's symbolic dimensions stay
    symbolic; a pool whose spatial input size is symbolic gets the dynamic-size form.
    """
    if example is None:
        example = program_example(program)
    gm = program.module()
    assert isinstance(gm, fx.GraphModule)
    converted, report = convert_aten_graph(gm, example, PROGRAM_SCOPE, dynamic=dynamic)
    if not report.converted:
        return copy.copy(program), report  # a new program object over the same graph: nothing was replaced
    with LOCK:
        program_out = _reexport(program, converted, example)
        reference = _run(gm, example)
        check = _check_whole(
            program_out.module(), example, reference, report.check.replacements if report.check else (), "the converted program"
        )
    lost = sorted(set(program.state_dict) ^ set(program_out.state_dict))
    if lost:
        raise FxpoolError(
            f"fxpool: the converted program's state differs from the original's in {lost}; this is a bug in fxpool's "
            f"re-export, please report it with the program"
        )
    return program_out, ConversionReport(report.records, check=check)


def program_example(program: ExportedProgram) -> Example:
    """The program's own example inputs, or random inputs of the shapes its user inputs were exported with."""
    stored = program.example_inputs
    if stored is not None:
        args, kwargs = stored
        return read_example(tuple(args), dict(kwargs))
    fakes = _user_input_values(program)
    leaves = []
    for fake in fakes:
        if not isinstance(fake, torch.Tensor):
            raise ExampleInputError(
                f"the program has no stored example inputs and a user input that is not a tensor ({fake!r}); pass "
                f"fxpool.convert(program, example_input) with the inputs the program was exported with"
            )
        shape = tuple(_hint(s) for s in fake.shape)
        if fake.dtype.is_floating_point:
            leaves.append(torch.randn(shape, dtype=fake.dtype, device=fake.device))
        elif fake.dtype == torch.bool:
            leaves.append(torch.randint(0, 2, shape, device=fake.device).bool())
        else:
            leaves.append(torch.randint(0, 2, shape, dtype=fake.dtype, device=fake.device))
    args, kwargs = torch.utils._pytree.tree_unflatten(leaves, program.call_spec.in_spec)
    return read_example(tuple(args), dict(kwargs))


def _hint(size: Any) -> int:
    if isinstance(size, int):
        return size
    hint = size.node.hint
    if hint is None:
        raise ExampleInputError(
            f"the program has no stored example inputs and its symbolic size {size} has no example value; pass "
            f"fxpool.convert(program, example_input)"
        )
    return int(hint)


def _user_input_values(program: ExportedProgram) -> list[Any]:
    placeholders = {node.name: node for node in program.graph.nodes if node.op == "placeholder"}
    values = []
    for spec in program.graph_signature.input_specs:
        if spec.kind == torch.export.graph_signature.InputKind.USER_INPUT:
            name = getattr(spec.arg, "name", None)
            values.append(placeholders[name].meta.get("val") if name in placeholders else getattr(spec.arg, "value", None))
    return values


# --- record, decide, rewrite -------------------------------------------------------------------


class _Probe(nn.Module):
    """Calls the ATen pool operator as the node did, and keeps its input and (values) result."""

    def __init__(self, target: Any, values_only: bool, key: str, seen: dict[str, _Seen]) -> None:
        super().__init__()
        self.target, self.values_only, self.key, self.seen = target, values_only, key, seen

    def forward(self, x: torch.Tensor, *rest: Any) -> Any:
        result = self.target(x, *rest)
        values = result[0] if self.values_only else result
        self.seen.setdefault(self.key, _Seen(x.detach().clone(), values.detach().clone()))
        return result


def _record(gm: fx.GraphModule, sites: list[AtenPoolSite], example: Example) -> tuple[dict[str, _Seen], Any]:
    """Each live site's input and native result on the example, and the graph's outputs."""
    probe = _graph_copy(gm, clone_buffers=True)
    seen: dict[str, _Seen] = {}
    nodes = _pool_nodes(probe)
    for index, site in enumerate(_pool_nodes_of(gm, sites)):
        if site is None:
            continue
        node = nodes[index]
        name = _free_name(probe, "fxpool_probe_")
        probe.add_submodule(name, _Probe(node.target, aten_returns_indices(node.target), site.location, seen))
        node.op, node.target = "call_module", name
    probe.recompile()
    output = _run(probe, example, clone=False)
    return seen, output


def _pool_nodes(gm: fx.GraphModule) -> list[fx.Node]:
    return [node for node in gm.graph.nodes if node.op == "call_function" and is_aten_pool(node.target)]


def _pool_nodes_of(gm: fx.GraphModule, sites: list[AtenPoolSite]) -> Iterator[AtenPoolSite | None]:
    """For each top-level pool node of ``gm``, in graph order, its live site (None: left or not a site)."""
    by_node = {site.node: site for site in sites}
    for node in _pool_nodes(gm):
        yield by_node.get(node)


def _run(gm: nn.Module, example: Example, clone: bool = True) -> Any:
    runner = structural_copy(gm, clone_buffers=True) if clone else gm
    if clone and isinstance(gm, fx.GraphModule):
        gm.graph.owning_module = gm  # the shallow copy claimed the shared graph; it stays the original's
    with example_run(example):
        return example.call(runner)


def _decide(site: AtenPoolSite, seen: _Seen | None, dynamic: bool) -> PoolDecision:
    if site.left is not None:
        return PoolDecision("left", site.left)
    if seen is None:
        return PoolDecision("left", "never ran on the example input, so its input size is unknown")
    dims = site.call.spatial_dims
    assert dims is not None
    sighting = PoolSighting(
        site.call.family,
        ((tuple(seen.input.shape[-dims:]), tuple(seen.output.shape[-dims:])),),
        site.requested,
        quantized=seen.input.is_quantized,
    )
    return decide_pool(sighting, dynamic=dynamic or site.symbolic)


def _replacement(site: AtenPoolSite, decision: PoolDecision, seen: _Seen) -> nn.Module:
    plan, dims = decision.plan, site.call.spatial_dims
    assert plan is not None and dims is not None
    replacement: nn.Module
    if decision.action == "dynamic":
        sizes = site.requested or tuple(seen.output.shape[-dims:])
        pool_class = DynamicAdaptiveAvgPool if plan.family == "avg" else DynamicAdaptiveMaxPool
        assert decision.dynamic_form is not None
        replacement = pool_class(sizes, location=site.location, kind=decision.dynamic_form.kind)
    else:
        weight_dtype = torch.float64 if seen.input.dtype == torch.float64 else torch.float32
        batched = seen.input.dim() == dims + 2
        replacement = ExactAdaptivePool(plan, site.location, weight_dtype, seen.input.device, batched=batched)
    return replacement.train(False)


def _rewrite(
    work: fx.GraphModule,
    original: fx.GraphModule,
    sites: list[AtenPoolSite],
    decisions: dict[str, PoolDecision],
    seen: dict[str, _Seen],
) -> dict[str, nn.Module]:
    """Put each replaced site's module in ``work`` (a graph copy of ``original``) in place of its node."""
    made: dict[str, nn.Module] = {}
    graph = work.graph
    nodes = _pool_nodes(work)
    for index, site in enumerate(_pool_nodes_of(original, sites)):
        if site is None or decisions[site.location].action == "left":
            continue
        node = nodes[index]
        replacement = _replacement(site, decisions[site.location], seen[site.location])
        name = _free_name(work, REPLACEMENT_PREFIX)
        work.add_submodule(name, replacement)
        with graph.inserting_before(node):
            new = graph.call_module(name, (node.args[0] if node.args else node.kwargs["self"],))
        new.meta.update({key: node.meta[key] for key in ("stack_trace", "nn_module_stack") if key in node.meta})
        if aten_returns_indices(node.target):
            for user in list(node.users):
                if user.args[1] == 0:
                    user.replace_all_uses_with(new)
                graph.erase_node(user)
        else:
            node.replace_all_uses_with(new)
        graph.erase_node(node)
        made[site.location] = replacement
    if made:
        graph.lint()
        work.recompile()
    return made


def _free_name(gm: nn.Module, prefix: str) -> str:
    index = 0
    while hasattr(gm, f"{prefix}{index}"):
        index += 1
    return f"{prefix}{index}"


def _graph_copy(gm: fx.GraphModule, clone_buffers: bool = False) -> fx.GraphModule:
    """A copy of ``gm`` over the same tensors (buffers cloned on request) with a graph of its own."""
    new = structural_copy(gm, clone_buffers=clone_buffers)
    assert isinstance(new, fx.GraphModule)
    gm.graph.owning_module = gm  # the shallow copy claimed the shared graph; it stays the original's
    new.graph = copy.deepcopy(gm.graph)
    return new


# --- check -------------------------------------------------------------------------------------


def _check_replacement(replacement: nn.Module, site: AtenPoolSite, seen: _Seen) -> ReplacementCheck:
    """The replacement (its eager and, for exact plans, its traced form) against the node's native result."""
    with torch.no_grad():
        outputs = [replacement(seen.input)]
        if isinstance(replacement, ExactAdaptivePool):
            outputs.append(replacement.traced_form(seen.input))
    worst, bound = 0.0, 0.0
    for output in outputs:
        mismatch, error, allowed = compare_outputs(output, seen.output)
        if site.call.family == "max":
            allowed = 0.0
        if mismatch is not None or error > allowed:
            raise SelfCheckError(
                f"fxpool: the replacement of ATen node {site.location} ({site.call.op}, input "
                f"{tuple(seen.input.shape)} -> {tuple(seen.output.shape)}) differs from the native operator on the "
                f"example: {mismatch or f'by {error:.3g} (allowed {allowed:.3g})'}. This is a bug in fxpool; please "
                f"report it with these shapes"
            )
        worst, bound = max(worst, error), allowed
    return ReplacementCheck(site.location, worst, bound)


def _check_whole(
    converted: nn.Module, example: Example, reference: Any, checks: tuple[ReplacementCheck, ...], what: str
) -> SelfCheck:
    output = _run(converted, example)
    mismatch, error, bound = compare_outputs(output, reference)
    if mismatch is not None:
        where = ", ".join(check.location for check in checks)
        raise SelfCheckError(
            f"fxpool: {what} differs from the original on the example {example.describe()}: {mismatch}, although "
            f"each replacement ({where}) matched its native pool; please report it with the program"
        )
    return SelfCheck("passed", f"{what} on the example {example.describe()}", error, bound, checks)


def _unchanged(sites: list[AtenPoolSite]) -> SelfCheck:
    why = "nothing was replaced, so the graph is the original" if sites else "the graph holds no adaptive pool"
    return SelfCheck("skipped", why)


# --- re-export ---------------------------------------------------------------------------------


def _reexport(program: ExportedProgram, converted: fx.GraphModule, example: Example) -> ExportedProgram:
    """``torch.export`` of the rewritten module with the program's dynamic dimensions, at its dialect.

    Replacement buffers only another tracer reads (the ONNX forms' indices) would be inputs of the
    program that nothing uses: they are dropped from the replacements and the module exported again.
    """
    dynamic_shapes = _dynamic_shapes(program, example)
    result = _export(converted, example, dynamic_shapes)
    dead = _unused_replacement_buffers(result)
    if dead:
        for target in dead:
            owner, _, name = target.rpartition(".")
            del converted.get_submodule(owner)._buffers[name]
        result = _export(converted, example, dynamic_shapes)
    if _dialect(program) == "ATEN" and _dialect(result) != "ATEN":
        before = _operators(program.graph_module)
        added = _operators(result.graph_module) - before
        table = torch.export.default_decompositions()
        keep = [op for op in list(table.keys()) if op not in added]
        for op in keep:
            table.pop(op)
        result = result.run_decompositions(table)
    return result


def _export(module: fx.GraphModule, example: Example, dynamic_shapes: Any) -> ExportedProgram:
    try:
        return torch.export.export(module, example.args, dict(example.kwargs), dynamic_shapes=dynamic_shapes, strict=False)
    except Exception as error:
        raise FxpoolError(
            f"fxpool: torch.export of the converted program failed ({type(error).__name__}: "
            f"{str(error).strip().splitlines()[0] if str(error).strip() else ''}); convert the nn.Module before "
            f"torch.export instead (fxpool.convert(model, x), then torch.export.export)"
        ) from error


def _unused_replacement_buffers(program: ExportedProgram) -> list[str]:
    """The targets (``fxpool_pool_N.name``) of replacement buffers the program takes but never reads."""
    unused = {node.name for node in program.graph.nodes if node.op == "placeholder" and not node.users}
    return [
        spec.target
        for spec in program.graph_signature.input_specs
        if spec.kind == torch.export.graph_signature.InputKind.BUFFER
        and spec.target is not None
        and spec.target.startswith(REPLACEMENT_PREFIX)
        and getattr(spec.arg, "name", None) in unused
    ]


def _dialect(program: ExportedProgram) -> str:
    return str(getattr(program.verifiers[0], "dialect", "")) if program.verifiers else ""


def _operators(gm: fx.GraphModule) -> set[Any]:
    return {
        node.target
        for sub in gm.modules()
        if isinstance(sub, fx.GraphModule)
        for node in sub.graph.nodes
        if node.op == "call_function"
    }


def _dynamic_shapes(program: ExportedProgram, example: Example) -> Any:
    """The program's symbolic dimensions as ``dynamic_shapes`` for the example's tensors (None: all static)."""
    fakes = _user_input_values(program)
    if not any(isinstance(f, torch.Tensor) and not all(isinstance(s, int) for s in f.shape) for f in fakes):
        return None
    kwargs = torch.export._tree_utils.reorder_kwargs(dict(example.kwargs), program.call_spec.in_spec)
    leaves = [leaf for leaf in tree_leaves((example.args, kwargs))]
    if len(leaves) != len(fakes):
        raise FxpoolError(
            f"fxpool: the example has {len(leaves)} input values but the program takes {len(fakes)}; pass the inputs "
            f"the program was exported with"
        )
    dims: dict[str, Any] = {}
    shapes = torch.export.ShapesCollection()
    for leaf, fake in zip(leaves, fakes):
        if not isinstance(fake, torch.Tensor) or all(isinstance(s, int) for s in fake.shape):
            continue
        spec: dict[int, Any] = {}
        for axis, size in enumerate(fake.shape):
            if isinstance(size, int):
                continue
            expr = size.node.expr
            linear = _linear_in_one_symbol(expr)
            if linear is None:
                spec[axis] = torch.export.Dim.AUTO
                continue
            symbol, scale, offset = linear
            if str(symbol) not in dims:
                bounds = program.range_constraints.get(symbol)
                low = _bound(bounds.lower if bounds is not None else None) or 0
                high = _bound(bounds.upper if bounds is not None else None)
                dims[str(symbol)] = torch.export.Dim(f"fxpool_{symbol}", min=low, max=high)
            dim = dims[str(symbol)]
            # a derived dimension (32 * h, h + 1) stays derived: its divisibility is part of the program's contract
            spec[axis] = dim if (scale, offset) == (1, 0) else scale * dim + offset
        shapes[leaf] = spec
    return shapes


def _linear_in_one_symbol(expr: Any) -> tuple[Any, int, int] | None:
    """``(s, a, b)`` where a size expression is ``a * s + b`` with integers ``a >= 1`` and ``b`` (a program's
    Dim, or one derived from it as ``32 * h``); None for anything else."""
    symbols = expr.free_symbols
    if len(symbols) != 1:
        return None
    (symbol,) = symbols
    scale = expr.coeff(symbol)
    offset = expr.subs(symbol, 0)
    if not (getattr(scale, "is_Integer", False) and getattr(offset, "is_Integer", False)) or int(scale) < 1:
        return None
    if (scale * symbol + offset - expr).simplify() != 0:
        return None
    return symbol, int(scale), int(offset)


def _bound(value: Any) -> int | None:
    """A range bound as an int, or None where it is unbounded (sympy's or torch's ``int_oo``)."""
    if isinstance(value, int):
        return value
    if value is None or not getattr(value, "is_Integer", False):  # int_oo and oo are no sympy Integer
        return None
    return int(value)


# --- report ------------------------------------------------------------------------------------


def _record_of(site: AtenPoolSite, decision: PoolDecision, seen: _Seen | None) -> PoolRecord:
    call, plan = site.call, decision.plan
    converted = decision.action != "left"
    replacement, kind = replacement_of(decision)
    reason = decision.reason
    if site.symbolic and decision.action == "dynamic":
        reason = reason.replace("dynamic=True", "a spatial size the program leaves symbolic", 1)
    requested = "computed at run time" if site.requested is None and call.dynamic_output_size else call.requested
    if site.requested is not None and call.dynamic_output_size:
        requested = str(site.requested)
    return PoolRecord(
        location=site.location,
        form="aten",
        op=call.op,
        input_shape=site.shapes[0] if seen is None else tuple(seen.input.shape),
        output_size=requested,
        output_shape=site.shapes[1] if seen is None else tuple(seen.output.shape),
        converted=converted,
        replacement=replacement,
        onnx_replacement=onnx_replacement_of(decision),
        reason=reason,
        size_agnostic=decision.action == "dynamic" or (plan is not None and converted and plan.size_agnostic),
        family=call.family,
        kind=kind,
    )
