"""The torch.fx pass: trace a module, find its adaptive pool nodes, swap them for replacements.

:func:`trace` treats as leaves, so that each is one node run as it is:

- every adaptive pool module (and fxpool's own replacements), so each pool is one node;
- every module with hooks of its own, since a trace would run them once on proxies and drop them
  (a feature-capture hook would stop firing); fxpool converts below such a module separately;
- TorchScript modules, which torch.fx cannot trace into;
- modules whose class reads ``self.training`` or asks ``torch.onnx.is_in_onnx_export()``, so that
  each is traced on its own (the first is kept as a call, the second gets both its branches).

A trace keeps only the branch the code takes, so code that asks ``torch.onnx.is_in_onnx_export()``
is traced twice, once per answer, and the module runs the export graph under export
(:func:`~fxpool.copying.install_graph`); where the export branch is not known (``export_branches``
false) such code is refused instead. A traced module whose output is a class of its own (a
transformers ``ModelOutput``), which torch.fx would return as a plain dict, returns that class
again. :func:`pool_nodes` lists the pool nodes in execution order with their
:class:`~fxpool.calls.PoolCall`. :func:`replace_nodes` swaps nodes
for modules and returns what it changed; it ends with dead-code elimination, removal of unused
submodules, ``lint`` and ``recompile``. Nothing here knows of ONNX or of how replacements are chosen.
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import fx, nn
from torch.utils._pytree import TreeSpec, tree_flatten, tree_unflatten

from .calls import PoolCall, describe_function, describe_module
from .copying import export_graph_of, graph_of, has_hooks
from .errors import SpecialisedArgumentError
from .globalstate import LOCK, ExportBranchError, export_flag


class PoolLeafTracer(fx.Tracer):
    """An fx tracer that keeps pools, hooked, scripted and mode-dependent modules as single nodes.

    ``shallow``: every submodule is a single node, so only the traced module's own forward is in
    the graph. Otherwise submodules are traced into, but for the leaves above; ``opaque_leaves``
    collects the qualified names of the hooked, scripted and mode-dependent ones (see
    :func:`reads_training_flag` and :func:`asks_export_flag`): the pools inside them are not in the
    graph, and the caller converts them separately.
    """

    def __init__(self, shallow: bool = False) -> None:
        super().__init__()
        self.shallow = shallow
        self.opaque_leaves: list[str] = []

    def is_leaf_module(self, m: nn.Module, module_qualified_name: str) -> bool:
        if self.shallow or describe_module(m) is not None or _is_fxpool_module(m):
            return True
        opaque = has_hooks(m) or isinstance(m, torch.jit.ScriptModule) or reads_training_flag(m) or asks_export_flag(m)
        if opaque:
            if module_qualified_name not in self.opaque_leaves:
                self.opaque_leaves.append(module_qualified_name)
            return True
        return super().is_leaf_module(m, module_qualified_name)


def _is_fxpool_module(m: nn.Module) -> bool:
    return type(m).__module__.startswith("fxpool.")


class ModeDependentForwardError(Exception):
    """The module's own code reads ``self.training``, so a trace would keep only the current mode's path."""


def reads_training_flag(module: nn.Module) -> bool:
    """Whether the module's class (torch.nn's own excepted) reads ``self.training`` anywhere in its code.

    A trace replaces ``if self.training:`` (or ``F.dropout(..., training=self.training)``) by the
    branch of the mode at conversion; such a module is kept as a call instead, so it keeps
    following ``.train()``/``.eval()``, and is converted below.
    """
    return _class_reads_training_flag(type(module))  # type: ignore[arg-type]  # nn.Module's __hash__ typing


@functools.cache
def _class_reads_training_flag(cls: type) -> bool:
    if cls.__module__.startswith(("torch.nn.", "fxpool.")) or cls is fx.GraphModule:
        return False  # torch.nn's modules read the flag at run time, below the traced graph
    return re.search(r"\bself\.training\b", _methods_source(cls)) is not None


def asks_export_flag(module: nn.Module) -> bool:
    """Whether the module's class asks ``torch.onnx.is_in_onnx_export()`` in its own code (smp's PSPBlock)."""
    return _class_asks_export_flag(type(module))  # type: ignore[arg-type]  # nn.Module's __hash__ typing


@functools.cache
def _class_asks_export_flag(cls: type) -> bool:
    if cls.__module__.startswith(("torch.", "fxpool.")) or cls is fx.GraphModule:
        return False
    return "is_in_onnx_export" in _methods_source(cls)


@functools.cache
def _methods_source(cls: type) -> str:
    """The source of the functions the class defines itself ("" where none is kept).

    Read function by function: ``inspect.getsource`` of a class parses its whole file into an AST
    (27 ms for timm's EfficientNet, against 4 ms for its methods), once per traced class.
    """
    sources = []
    for attribute in vars(cls).values():
        function = attribute.fget if isinstance(attribute, property) else getattr(attribute, "__func__", attribute)
        if inspect.isfunction(function):
            try:
                sources.append(inspect.getsource(function))
            except (OSError, TypeError):  # defined where no source is kept
                continue
    return "\n".join(sources)


@dataclass(frozen=True)
class Traced:
    """A traced module and the qualified names (relative to it) of the leaves it did not look into.

    ``export_graph_module`` is the graph of its export branch, where its code asks
    ``torch.onnx.is_in_onnx_export()`` and the two answers trace differently.
    """

    graph_module: fx.GraphModule
    opaque_leaves: tuple[str, ...]
    export_graph_module: fx.GraphModule | None = None
    shallow: bool = False  # every submodule is one node: the graph is the module's own forward


def trace(
    module: nn.Module,
    unpassed: tuple[str, ...] | None = None,
    *,
    output_spec: TreeSpec | None = None,
    export_branches: bool = False,
    shallow: bool = False,
) -> Traced:
    """Symbolically trace ``module``; raises whatever torch.fx raises for untraceable code.

    ``unpassed`` names forward parameters defaulting to ``None`` that the example's call did not
    pass (or passed as ``None``): they are traced as ``None`` (torch.fx would otherwise make them
    proxies, so ``if mask is not None`` took the wrong branch), and the graph guards every such
    parameter against the other spelling (:func:`check_optional_argument`). ``None`` means the call
    is not known (a submodule called from untraceable code): no guards. ``output_spec`` is the
    structure of the module's output as it ran, where torch.fx would not keep it. With
    ``export_branches``, code asking ``torch.onnx.is_in_onnx_export()`` is traced once per answer;
    without, it raises :class:`~fxpool.globalstate.ExportBranchError`. torch.fx patches
    ``nn.Module.__call__`` for the whole process while it traces, so traces are serialised under
    :data:`~fxpool.globalstate.LOCK`.
    """
    root = graph_of(module) or module  # a converted module runs its graph: trace that, not its class's forward
    if root is module and isinstance(module, nn.Module) and reads_training_flag(module):
        raise ModeDependentForwardError(
            f"{type(module).__name__} reads self.training, so a trace would keep only the "
            f"{'train' if module.training else 'eval'}-mode path; converted below instead"
        )
    if export_graph_of(module) is not None:
        raise ExportBranchError("converted before with an export branch of its own; converted below instead")
    eager, reads = _trace_once(module, root, unpassed, output_spec, False if export_branches else None, shallow)
    if not reads:
        return eager
    export, _ = _trace_once(module, root, unpassed, output_spec, True, shallow)
    if export.graph_module.code == eager.graph_module.code:
        return eager  # it asks, but both answers take the same path
    return Traced(eager.graph_module, eager.opaque_leaves, export.graph_module, shallow)


def _trace_once(
    module: nn.Module,
    root: nn.Module,
    unpassed: tuple[str, ...] | None,
    output_spec: TreeSpec | None,
    answer: bool | None,
    shallow: bool,
) -> tuple[Traced, int]:
    tracer = PoolLeafTracer(shallow)
    with LOCK, export_flag(answer) as reads:
        graph = tracer.trace(root, concrete_args={name: None for name in unpassed or ()} or None)
    name = module.__class__.__name__ if isinstance(module, nn.Module) else module.__name__
    if unpassed is not None:  # the example's call is known: guard the other spellings
        _guard_optional_arguments(graph, root, set(unpassed), name)
    if output_spec is not None:
        _restore_output_structure(graph, output_spec)
    return Traced(fx.GraphModule(tracer.root, graph, name), tuple(tracer.opaque_leaves), shallow=shallow), reads.count


def _restore_output_structure(graph: fx.Graph, spec: TreeSpec) -> None:
    """Make the graph return its output in ``spec``'s structure where torch.fx flattened the class away."""
    output = next(node for node in reversed(graph.nodes) if node.op == "output")
    leaves, traced_spec = tree_flatten(output.args[0])
    if traced_spec == spec or traced_spec.num_leaves != spec.num_leaves:
        return
    with graph.inserting_before(output):
        rebuilt = graph.call_function(_unflattener(spec), (list(leaves),))
    output.args = (rebuilt,)


def _unflattener(spec: TreeSpec) -> Callable[[list[Any]], Any]:
    def restore_output(leaves: list[Any]) -> Any:
        return tree_unflatten(leaves, spec)

    restore_output.__qualname__ = restore_output.__name__ = f"as_{spec.type.__name__}"
    return restore_output


@fx.node.has_side_effect
def check_optional_argument(value: object, name: str, traced_as_none: bool, owner: str) -> object:
    """The guard a traced graph runs on each argument that defaults to ``None``.

    The graph holds only the branch the example took (``if mask is not None``), so the other
    spelling must be refused, not run down the wrong branch.
    """
    if (value is None) == traced_as_none:
        return value
    if traced_as_none:
        raise SpecialisedArgumentError(
            f"{owner}.forward was converted with {name!r} left out (None), so only the code for a missing "
            f"{name} was kept, but it was given {type(value).__name__}; convert with an example that passes "
            f"{name} (e.g. fxpool.convert(model, (x, {{{name!r}: {name}}}))) to keep that code"
        )
    raise SpecialisedArgumentError(
        f"{owner}.forward was converted with {name!r} given, so only the code for a given {name} was kept, "
        f"but it was called with {name}=None; convert with an example that leaves {name} out for that code"
    )


fx.wrap("check_optional_argument")  # kept as one node when a converted graph is traced again


def _guard_optional_arguments(graph: fx.Graph, root: nn.Module, traced_as_none: set[str], owner: str) -> None:
    """Insert :func:`check_optional_argument` for each parameter of ``root.forward`` defaulting to ``None``.

    Parameters traced as ``None`` get their own name back (torch.fx renames them ``mask_1`` and
    asserts with a bare AssertionError); the others pass through the guard to their users.
    """
    try:
        parameters = list(inspect.signature(root.forward).parameters.values())
    except (TypeError, ValueError):
        return
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    if len(placeholders) != len(parameters) or any(p.kind not in kinds for p in parameters):
        return  # *args/**kwargs: placeholders do not map one-to-one onto parameters
    last = placeholders[-1]
    for node, parameter in zip(placeholders, parameters):
        if parameter.default is not None:
            continue
        none = parameter.name in traced_as_none
        if any(user.target is check_optional_argument for user in node.users):
            continue  # a graph traced again keeps the guards it has
        if none:
            for user in list(node.users):
                if user.op == "call_function" and getattr(user.target, "__name__", "") == "_assert_is_none":
                    graph.erase_node(user)
            node.target = parameter.name
        with graph.inserting_after(last):
            guard = graph.call_function(check_optional_argument, (node, parameter.name, none, owner))
        last = guard
        if not none:
            node.replace_all_uses_with(guard, delete_user_cb=lambda user: user is not guard)


@dataclass(frozen=True)
class PoolNode:
    node: fx.Node
    call: PoolCall


def unpassed_none_defaults(
    module: nn.Module, args: tuple[object, ...], kwargs: Mapping[str, object] | None = None
) -> tuple[str, ...]:
    """Parameters of ``module.forward`` that default to ``None`` and that the example leaves out or passes as ``None``."""
    try:
        signature = inspect.signature(module.forward)
        bound = signature.bind_partial(*args, **(kwargs or {}))
    except (TypeError, ValueError):  # no signature, or args that do not fit it: trace as is
        return ()
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return tuple(
        name
        for name, parameter in signature.parameters.items()
        if bound.arguments.get(name) is None and parameter.kind in kinds and parameter.default is None
    )


def pool_nodes(gm: fx.GraphModule) -> list[PoolNode]:
    """Adaptive pool nodes of the graph in execution order, with what each calls."""
    found = []
    for node in gm.graph.nodes:
        call = None
        if node.op == "call_module":
            call = describe_module(gm.get_submodule(node.target))
        elif node.op == "call_function":
            described = describe_function(node.target, node.args, node.kwargs)
            call = None if described is None else described[0]
        if call is not None:
            found.append(PoolNode(node, call))
    return found


def pool_input(node: fx.Node) -> fx.Node:
    """The tensor a pool node pools."""
    if node.args:
        return node.args[0]  # type: ignore[return-value]
    return node.kwargs.get("input", node.kwargs.get("self"))  # type: ignore[return-value]


@dataclass(frozen=True)
class PassResult:
    graph_module: fx.GraphModule
    replaced: tuple[str, ...]  # names of the nodes swapped out

    @property
    def modified(self) -> bool:
        return bool(self.replaced)


def replace_nodes(
    gm: fx.GraphModule, replacements: dict[fx.Node, nn.Module], mirror: nn.Module | None = None, *, fresh_names: bool = False
) -> PassResult:
    """Replace each node by a ``call_module`` of its module.

    A pool module used by one node only is replaced under its own name, so the converted model
    keeps the original's module paths; other replacements (all, with ``fresh_names``) get fresh
    ``fxpool_*`` names. Each
    replacement is installed at the same path of ``mirror`` too (the module the graph will run for,
    see :func:`install_graph`), so that its other methods reach the replacements as well.
    """
    replaced = []
    for node, module in replacements.items():
        name = _replacement_name(gm, node, mirror, fresh_names)
        owner_name, _, leaf = name.rpartition(".")
        setattr(gm.get_submodule(owner_name) if owner_name else gm, leaf, module)
        if mirror is not None:
            setattr(mirror.get_submodule(owner_name) if owner_name else mirror, leaf, module)
        with gm.graph.inserting_after(node):
            new = gm.graph.call_module(name, (pool_input(node),))
        new.meta.update(node.meta)
        node.replace_all_uses_with(new)
        gm.graph.erase_node(node)
        replaced.append(node.name)
    gm.graph.eliminate_dead_code()
    gm.delete_all_unused_submodules()
    gm.graph.lint()
    gm.recompile()
    return PassResult(gm, tuple(replaced))


def _replacement_name(gm: fx.GraphModule, node: fx.Node, mirror: nn.Module | None, fresh: bool) -> str:
    if node.op == "call_module" and module_uses(gm, node.target) == 1 and not fresh:
        return str(node.target)
    base = "fxpool_" + (str(node.target).replace(".", "_") if node.op == "call_module" else node.name)
    name, index = base, 1
    while hasattr(gm, name) or (mirror is not None and hasattr(mirror, name)):
        name, index = f"{base}_{index}", index + 1
    return name


def module_uses(gm: fx.GraphModule, target: object) -> int:
    """How many nodes call the submodule ``target``."""
    return sum(1 for n in gm.graph.nodes if n.op == "call_module" and n.target == target)
