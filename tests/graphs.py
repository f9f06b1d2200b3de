"""What the exported graphs may hold: no data-dependent gathers or control flow."""

from __future__ import annotations

# The stock dynamo decomposition's ops: data-dependent gathers and control flow. Constant-index
# Gathers are the exact forms' own.
DATA_DEPENDENT = frozenset({"GatherND", "GatherElements", "Where", "Loop", "If", "ScatterND"})


def data_dependent_ops(path: str) -> set[str]:
    """The DATA_DEPENDENT ops of the ONNX graph at ``path``."""
    import onnx

    return {n.op_type for n in onnx.load(str(path)).graph.node} & DATA_DEPENDENT
