"""torch.export programs and ATen-level graphs: the pipeline's second front end (see ARCHITECTURE.md).

Each ATen pool node is a site ``<program>:NODE`` (``<graph>:NODE`` for a graph module), matched in graph order with
the calls the recording saw the graph's own forward make; a node in a control-flow subgraph is left. A program is
exported again with its own dynamic dimensions: the new one keeps the original's signature and state and holds only
ATen operators (no fxpool code, no custom op)."""

from __future__ import annotations

import copy
import itertools
import operator
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import fx, nn
from torch.export import ExportedProgram
from torch.utils._pytree import tree_leaves

from .building import Built, replacement_module
from .calls import PoolCall, aten_returns_indices, describe_aten
from .copying import structural_copy
from .deciding import SiteDecision
from .errors import ExampleInputError, FxpoolError, error_summary
from .example import Example, read_example
from .finding import FoundPools, PoolSite
from .proving import ATEN_KINDS, NativePool, TracedPools
from .recording import PoolEvent, Recording
from .sizechecks import traced_size, traced_sizes

PROGRAM_SCOPE = "<program>"
GRAPH_SCOPE = "<graph>"
REPLACEMENT_PREFIX = "fxpool_pool_"  # the replacement modules' attribute names in the rewritten graph module
PROGRAM_TRACER = "torch.export (the converted program's own graph)"


def has_aten_pools(module: Any) -> bool:
    """True for a ``GraphModule`` whose graph (or a subgraph of it) calls an ATen adaptive pool operator."""
    return isinstance(module, fx.GraphModule) and any(
        _pool_nodes(sub) for sub in module.modules() if isinstance(sub, fx.GraphModule)
    )


@dataclass(frozen=True)
class _PoolNode:
    """An ATen pool node, its pool call, and the example values (fake tensors, or None) of its input and output."""

    node: fx.Node
    call: PoolCall
    fake_in: Any
    fake_out: Any


def _pool_nodes(gm: fx.GraphModule) -> list[_PoolNode]:
    found = []
    for node in gm.graph.nodes:
        described = describe_aten(node.target, node.args, node.kwargs) if node.op == "call_function" else None
        if described is not None:
            call, source = described
            fake_out = node.meta.get("val")
            fake_out = fake_out[0] if isinstance(fake_out, (tuple, list)) else fake_out
            found.append(_PoolNode(node, call, source.meta.get("val") if isinstance(source, fx.Node) else None, fake_out))
    return found


def graph_copy(gm: nn.Module) -> fx.GraphModule:
    """A copy of ``gm`` over the same tensors with a graph of its own, for the replacements to go into."""
    new = structural_copy(gm)
    assert isinstance(gm, fx.GraphModule) and isinstance(new, fx.GraphModule)
    new.graph = copy.deepcopy(gm.graph)
    return new


def find_graph_pools(gm: nn.Module, recording: Recording, scope: str) -> FoundPools:
    """Every ATen pool node of ``gm``'s graph and of its subgraphs, with the recording's call of each."""
    assert isinstance(gm, fx.GraphModule)
    top = [e for e in recording.events if e.module_name is None and len(e.scope) == 1]
    sites = [
        PoolSite(e.module_name or "<root>", e.call, (e,), already=e.already_converted)
        for e in recording.events
        if e.already_converted is not None  # fxpool's replacements in a graph converted before
    ]
    pools = _pool_nodes(gm)
    if len(top) != len(pools):
        raise FxpoolError(
            f"fxpool: the graph has {len(pools)} ATen pool node(s) but its run on the example made {len(top)} pool "
            f"call(s) from its own forward; this is a bug in fxpool, please report it with the graph"
        )
    sites += [_site(pool, event, f"{scope}:{pool.node.name}") for pool, event in zip(pools, top)]
    for name, sub in gm.named_modules():
        if sub is gm or not isinstance(sub, fx.GraphModule):
            continue
        for pool in _pool_nodes(sub):
            why = (
                f"inside the subgraph {name!r} (a torch.cond/while_loop branch or another higher-order op), "
                f"which fxpool does not rewrite; export the model with that branch taken, or convert the "
                f"nn.Module before torch.export"
            )
            sites.append(PoolSite(f"{scope}:{name}.{pool.node.name}", pool.call, (), left=why))
    return FoundPools(tuple(sites))


def _site(pool: _PoolNode, event: PoolEvent, location: str) -> PoolSite:
    """The site of a pool node; an output size the graph computes stays dynamic (the guards leave it) unless it
    is constant, or the input's own size on a symbolic axis (``None``, kept)."""
    call, dims = pool.call, pool.call.spatial_dims
    assert dims is not None
    in_sizes = tuple(pool.fake_in.shape[-dims:]) if isinstance(pool.fake_in, torch.Tensor) else None
    symbolic = in_sizes is not None and not all(isinstance(s, int) for s in in_sizes)
    requested = _requested(pool.node, dims, in_sizes, pool.fake_out) if call.dynamic_output_size else None
    if requested is not None:
        call = replace(call, output_size=requested, dynamic_output_size=False)
    if aten_returns_indices(pool.node.target):
        call = replace(call, return_indices=_reads_indices(pool.node))
    return PoolSite(location, call, (event,), node=pool.node.name, symbolic=symbolic)


def _requested(node: fx.Node, dims: int, in_sizes: tuple[Any, ...] | None, fake_out: Any) -> tuple[int | None, ...] | None:
    sizes = node.args[1] if len(node.args) > 1 else node.kwargs.get("output_size")
    out_sizes = tuple(fake_out.shape[-dims:]) if isinstance(fake_out, torch.Tensor) else None
    if in_sizes is None or out_sizes is None or not isinstance(sizes, (list, tuple)) or len(sizes) != dims:
        return None
    requested: list[int | None] = []
    for size, size_in, size_out in zip(sizes, in_sizes, out_sizes):
        if isinstance(size, int):
            requested.append(size)
        elif isinstance(size_in, torch.SymInt) and isinstance(size_out, torch.SymInt) and size_in.node.expr == size_out.node.expr:
            requested.append(None)
        else:
            return None
    return tuple(requested)


def _reads_indices(node: fx.Node) -> bool:
    """Whether the graph reads a max pool node's indices (or its result whole), not only ``getitem(node, 0)``."""
    for user in node.users:
        index = user.args[1] if user.op == "call_function" and len(user.args) == 2 else None
        if user.target is not operator.getitem or index not in (0, 1) or (index == 1 and user.users):
            return True
    return False


def put_in_graph(gm: nn.Module, found: FoundPools, decisions: tuple[SiteDecision, ...], fallback_device: torch.device) -> Built:
    """Call each replaced site's module in ``gm`` (a :func:`graph_copy`) in place of its node."""
    assert isinstance(gm, fx.GraphModule)
    graph = gm.graph
    nodes = {node.name: node for node in graph.nodes}
    changed = False
    for chosen in decisions:
        site = chosen.site
        if not chosen.replaced or site.node is None:
            continue
        node = nodes[site.node]
        name = next(f"{REPLACEMENT_PREFIX}{i}" for i in itertools.count() if not hasattr(gm, f"{REPLACEMENT_PREFIX}{i}"))
        gm.add_submodule(name, replacement_module(chosen, site.events[0], fallback_device))
        with graph.inserting_before(node):
            new = graph.call_module(name, (node.args[0] if node.args else node.kwargs["self"],))
        new.meta.update({key: node.meta[key] for key in ("stack_trace", "nn_module_stack") if key in node.meta})
        if aten_returns_indices(node.target) and not chosen.decision.returns_indices:  # values only
            for user in list(node.users):
                if user.args[1] == 0:
                    user.replace_all_uses_with(new)
                graph.erase_node(user)
        else:
            node.replace_all_uses_with(new)
        graph.erase_node(node)
        changed = True
    if changed:
        graph.lint()
        gm.recompile()
    return Built(gm, changed)


def program_example(program: ExportedProgram) -> Example:
    """The program's own example inputs, or random inputs of the shapes its user inputs were exported with."""
    args, kwargs = program.example_inputs or _random_inputs(program)
    return read_example(tuple(args), dict(kwargs))


def _random_inputs(program: ExportedProgram) -> tuple[Any, Any]:
    leaves = []
    for fake in _user_input_values(program):
        if not isinstance(fake, torch.Tensor):
            raise ExampleInputError(
                f"the program has no stored example inputs and a user input that is not a tensor ({fake!r}); pass "
                f"fxpool.convert(program, example_input) with the inputs the program was exported with"
            )
        shape = tuple(_hint(s) for s in fake.shape)
        if fake.dtype.is_floating_point:
            leaves.append(torch.randn(shape, dtype=fake.dtype, device=fake.device))
        else:  # integers and booleans: 0 or 1
            leaves.append(torch.randint(0, 2, shape, dtype=fake.dtype, device=fake.device))
    return torch.utils._pytree.tree_unflatten(leaves, program.call_spec.in_spec)


def _hint(size: Any) -> int:
    hint = traced_size(size)
    if hint is None:
        raise ExampleInputError(
            f"the program has no stored example inputs and its symbolic size {size} has no example value; pass "
            f"fxpool.convert(program, example_input)"
        )
    return hint


def _user_input_values(program: ExportedProgram) -> list[Any]:
    placeholders = {node.name: node for node in program.graph.nodes if node.op == "placeholder"}
    values = []
    for spec in program.graph_signature.input_specs:
        if spec.kind == torch.export.graph_signature.InputKind.USER_INPUT:
            name = getattr(spec.arg, "name", None)
            values.append(placeholders[name].meta.get("val") if name in placeholders else getattr(spec.arg, "value", None))
    return values


def reexport(program: ExportedProgram, converted: nn.Module, example: Example) -> ExportedProgram:
    """``torch.export`` of the rewritten module with the program's dynamic dimensions, at its dialect; replacement
    buffers only another tracer reads (the ONNX forms' indices) are dropped, and the module exported again."""
    dynamic_shapes = _dynamic_shapes(program, example)
    result = _export(converted, example, dynamic_shapes)
    dead = _unused_replacement_buffers(result)
    if dead:
        for target in dead:
            owner, _, name = target.rpartition(".")
            del converted.get_submodule(owner)._buffers[name]
        result = _export(converted, example, dynamic_shapes)
    if _dialect(program) == "ATEN" and _dialect(result) != "ATEN":
        added = _operators(result.graph_module) - _operators(program.graph_module)
        table = torch.export.default_decompositions()
        for op in [op for op in table.keys() if op not in added]:
            table.pop(op)
        result = result.run_decompositions(table)
    lost = sorted(set(program.state_dict) ^ set(result.state_dict))
    if lost:
        raise FxpoolError(
            f"fxpool: the converted program's state differs from the original's in {lost}; this is a bug in fxpool's "
            f"re-export, please report it with the program"
        )
    return result


def _export(module: nn.Module, example: Example, dynamic_shapes: Any) -> ExportedProgram:
    try:
        return torch.export.export(module, example.args, dict(example.kwargs), dynamic_shapes=dynamic_shapes, strict=False)
    except Exception as error:
        raise FxpoolError(
            f"fxpool: torch.export of the converted program failed ({error_summary(error)}); convert the nn.Module before "
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
    leaves = tree_leaves((example.args, kwargs))
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
            linear = _linear_in_one_symbol(size.node.expr)
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
    return int(value) if isinstance(value, int) or getattr(value, "is_Integer", False) else None  # int_oo is no Integer


def program_pools(program: ExportedProgram, *, shapes: bool) -> TracedPools:
    """The native pools the finder reads in ``program``'s own graph and subgraphs (shapes at the example's
    sizes where ``shapes``: the program was exported at the example)."""
    found = []
    for sub in program.graph_module.modules():
        if not isinstance(sub, fx.GraphModule):
            continue
        for pool in _pool_nodes(sub):
            in_shape, out_shape = (_example_shape(pool.fake_in), _example_shape(pool.fake_out)) if shapes else (None, None)
            found.append(NativePool(ATEN_KINDS[pool.node.target], pool.call.family, "", in_shape, out_shape))
    return TracedPools(PROGRAM_TRACER, tuple(found))


def _example_shape(fake: Any) -> tuple[int, ...] | None:
    """A graph value's shape at the example (a symbolic size at its example value), None where unknown."""
    if not isinstance(fake, torch.Tensor):
        return None
    return traced_sizes(fake.shape)
