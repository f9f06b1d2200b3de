"""What the exported graphs may hold: no data-dependent gathers or control flow."""

from __future__ import annotations

# The stock dynamo decomposition's ops: data-dependent gathers and control flow. Constant-index
# Gathers and a Where on a constant mask are the exact forms' own (see data_dependent_ops).
DATA_DEPENDENT = frozenset({"GatherND", "GatherElements", "Where", "Loop", "If", "ScatterND"})


def data_dependent_ops(path: str) -> set[str]:
    """The DATA_DEPENDENT ops of the ONNX graph at ``path``; a Where counts only if its condition is
    not a constant (an initializer or a Constant node's output)."""
    import onnx

    graph = onnx.load(str(path)).graph
    constants = {t.name for t in graph.initializer} | {o for n in graph.node if n.op_type == "Constant" for o in n.output}
    found = {n.op_type for n in graph.node if n.op_type in DATA_DEPENDENT - {"Where"}}
    return found | {"Where" for n in graph.node if n.op_type == "Where" and n.input[0] not in constants}
