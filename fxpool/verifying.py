"""Verification of exported ONNX graphs: ``onnx.checker``, then onnxruntime's CPU provider against PyTorch.

Where the CPU provider has no kernel for a bfloat16 or float16 op of the graph (no bfloat16 ``Conv``, say),
`float32_copy` widens the same graph to float32 (low-precision values are exact there) and runs it against a float32
copy of the model: the graph's structure and weights are verified, and `Verification.how` says so. A graph that fails
raises `ExportVerificationError`; the file stays where it is, for the caller to set aside."""

from __future__ import annotations

import copy
import os
import re
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_leaves, tree_map_only

from .copying import structural_copy
from .errors import ExportVerificationError, error_summary, require
from .example import Example, example_run, read_example
from .globalstate import LOCK


@dataclass(frozen=True)
class Verification:
    """What verification compared, and how far onnxruntime was from PyTorch."""

    max_abs_error: float
    max_rel_error: float
    how: str  # in words: what ran where


def op_histogram(path: str) -> dict[str, int]:
    """How often each ONNX op type occurs in the graph (subgraphs and functions included)."""
    import onnx

    model = onnx.load(path, load_external_data=False)
    counts: Counter[str] = Counter()

    def walk(nodes: Any) -> None:
        for node in nodes:
            counts[node.op_type] += 1
            for attribute in node.attribute:
                if attribute.type == onnx.AttributeProto.GRAPH:
                    walk(attribute.g.node)
                for graph in attribute.graphs:
                    walk(graph.node)

    walk(model.graph.node)
    for function in model.functions:
        walk(function.node)
    return dict(sorted(counts.items()))


def onnxruntime_session(path: str) -> Any:
    """An onnxruntime ``InferenceSession`` on the graph at ``path``, on the CPU."""
    import onnxruntime

    return onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])


def run_onnxruntime(path: str, example_input: Any, *, forward: Callable[..., Any] | None = None) -> list[Any]:
    """Outputs of the ONNX graph at ``path`` on the tensors of ``example_input`` (read as ``convert`` reads it).

    Graph inputs are fed by name where every one is named after a tensor argument of ``forward`` (the exporters'
    naming), else in order, keyword arguments in ``forward``'s parameter order."""
    session = onnxruntime_session(path)
    feeds = _feeds([i.name for i in session.get_inputs()], read_example(example_input), forward)
    return session.run(None, {name: t.detach().cpu().numpy() for name, t in feeds.items()})


def _feeds(names: list[str], example: Example, forward: Callable[..., Any] | None) -> dict[str, torch.Tensor]:
    """The tensor of ``example`` for each of the graph's inputs ``names`` (see :func:`run_onnxruntime`)."""
    named = example.tensors_in_signature_order(forward) if forward is not None else [("", t) for t in example.tensors()]
    if forward is not None and len(named) != len(names):
        named = example.tensors_in_signature_order(forward, defaults_as_inputs=True)
    by_name = dict(named)
    # The TorchScript exporter suffixes input names ("x.1") and drops unused inputs: match by name where there are names
    parameters = {name: re.sub(r"\.\d+$", "", name) for name in names}
    if len(by_name) == len(named) and set(parameters.values()) <= set(by_name):
        feeds = {name: by_name[parameter] for name, parameter in parameters.items()}
    else:
        if len(names) != len(named):
            raise ValueError(
                f"the graph has {len(names)} inputs ({', '.join(names)}) but the example "
                f"{example.describe()} holds {len(named)} tensors"
            )
        feeds = {name: tensor for name, (_, tensor) in zip(names, named)}
    return feeds


def verify_onnx(path: str, model: nn.Module, example_input: Any, *, rtol: float = 1e-4, atol: float = 1e-5) -> Verification:
    """Check the file and compare onnxruntime with ``model`` on the example.

    An output passes where ``|ort - torch| <= atol * scale + rtol * |torch|``, ``scale`` its largest magnitude (at
    least 1): random deep networks reach outputs in the thousands, where float32 sums alone leave errors near 1e-3
    on elements near zero (in the stock export too). Float16 and bfloat16 get at least four units in the last place."""
    require("onnx", "ONNX verification")
    require("onnxruntime", "ONNX verification (pass verify=False, or --no-verify, to export unverified)")
    import onnx

    example = read_example(example_input)
    try:
        onnx.checker.check_model(path)
    except Exception as error:
        raise ExportVerificationError(f"the exported graph is not valid ONNX: {error}{_returned_inputs(path)}") from error
    try:
        outputs = run_onnxruntime(path, example, forward=model.forward)
    except Exception as error:
        low = _low_precision_types(path)
        if not low:
            raise ExportVerificationError(f"the exported graph does not load or run: {error}") from error
        why = f"onnxruntime's CPU provider cannot run the {' and '.join(low)} graph ({error_summary(error)})"
        return _verify_float32_copy(path, model, example, rtol, atol, why)
    abs_error, rel_error = _compare(outputs, _expected(model, example), rtol, atol)
    second = _at_a_second_size(path, model, example, rtol, atol)
    return Verification(abs_error, rel_error, f"onnxruntime (CPU) on the graph as exported, against the model{second}")


def _returned_inputs(path: str) -> str:
    """Why a graph names an output after an input, where it does: the model returns that input unchanged."""
    import onnx

    graph = onnx.load(path, load_external_data=False).graph
    names = sorted({i.name for i in graph.input} & {o.name for o in graph.output})
    if not names:
        return ""
    return (
        f". The model returns its input {', '.join(map(repr, names))} unchanged, and torch.onnx's dynamo exporter names"
        " that output after the input where input_names repeats the forward's parameter name (nn.Identity exports"
        " so too): pass output_names, or input_names other than the parameter's name"
    )


def _at_a_second_size(path: str, model: nn.Module, example: Example, rtol: float, atol: float) -> str:
    """Where the graph has dynamic axes, onnxruntime against the model once more with every dynamic axis grown by its
    largest power-of-two factor up to a quarter of it or 32 (224 -> 256, 512 -> 640, 7 -> 8: those powers of two that
    divide it still do), its new entries repeating the example's first ones (values of the example's own kind); a
    graph that does not run there or is wrong there raises. In words, what was run (or why not)."""
    import onnx

    graph = onnx.load(path, load_external_data=False).graph
    weights = {initializer.name for initializer in graph.initializer}
    dims = {i.name: i.type.tensor_type.shape.dim for i in graph.input if i.name not in weights}
    dynamic = {name: [axis for axis, dim in enumerate(shape) if not dim.HasField("dim_value")] for name, shape in dims.items()}
    if not any(dynamic.values()):
        return ""
    session = onnxruntime_session(path)
    feeds = _feeds([i.name for i in session.get_inputs()], example, model.forward)
    grown = {}
    for name, tensor in feeds.items():
        for axis in [axis for axis in dynamic.get(name, []) if axis < tensor.dim() and tensor.shape[axis] > 0]:
            size = tensor.shape[axis]
            step = size & -size  # halved down to a quarter of the axis or 32: 512 -> 640, not 1024 (4x the memory in 2d)
            while step > max(size // 4, 32):
                step //= 2
            tensor = torch.cat([tensor, tensor.narrow(axis, 0, step)], axis)
        grown[id(feeds[name])] = tensor
    second = Example(*tree_map_only(torch.Tensor, lambda t: grown.get(id(t), t), (example.args, dict(example.kwargs))))
    sizes = ", ".join(f"{name} {tuple(grown[id(t)].shape)}" for name, t in feeds.items() if dynamic.get(name))
    try:
        expected = _expected(model, second)
    except Exception as error:  # the model itself refuses that size: nothing to compare with
        return f"; not at a second size: the model does not run at {sizes} in PyTorch ({error_summary(error)})"
    try:
        outputs = session.run(None, {name: grown[id(t)].detach().cpu().numpy() for name, t in feeds.items()})
        _compare(outputs, expected, rtol, atol)
    except Exception as error:
        raise ExportVerificationError(
            f"the graph is exact at the example's size but not at {sizes}, within its dynamic axes: {error_summary(error)}"
        ) from error
    return f", at the example's size and at {sizes}"


def _verify_float32_copy(path: str, model: nn.Module, example: Example, rtol: float, atol: float, why: str) -> Verification:
    import onnx

    widened = float32_copy(onnx.load(path))
    model32 = copy.deepcopy(model).float()  # a deep copy: .float() would write the caller's parameters
    floats = (example.args, dict(example.kwargs))
    example32 = Example(*tree_map_only(torch.Tensor, lambda t: t.float() if t.is_floating_point() else t, floats))
    with tempfile.TemporaryDirectory() as folder:
        copy_path = os.path.join(folder, "float32.onnx")
        onnx.save(widened, copy_path)
        try:
            outputs = run_onnxruntime(copy_path, example32, forward=model32.forward)
        except Exception as error:
            raise ExportVerificationError(f"{why}, and its float32 copy does not run either: {error_summary(error)}") from error
    abs_error, rel_error = _compare(outputs, _expected(model32, example32), rtol, atol)
    return Verification(abs_error, rel_error, f"a float32 copy of the graph against a float32 copy of the model: {why}")


def float32_copy(model: Any) -> Any:
    """The ONNX model with every bfloat16 and float16 tensor, cast and value type made float32."""
    import onnx
    from onnx import TensorProto, numpy_helper

    low = {TensorProto.BFLOAT16, TensorProto.FLOAT16}
    widened = copy.deepcopy(model)

    def widen_tensor(tensor: Any) -> None:
        if tensor.data_type in low:
            values = numpy_helper.to_array(tensor).astype("float32")
            tensor.CopyFrom(numpy_helper.from_array(values, tensor.name))

    def widen_type(value: Any) -> None:
        if value.type.HasField("tensor_type") and value.type.tensor_type.elem_type in low:
            value.type.tensor_type.elem_type = TensorProto.FLOAT

    def widen_nodes(nodes: Any) -> None:
        for node in nodes:
            for attribute in node.attribute:
                if attribute.type == onnx.AttributeProto.TENSOR:
                    widen_tensor(attribute.t)
                elif attribute.type == onnx.AttributeProto.GRAPH:
                    widen_graph(attribute.g)
                elif attribute.name == "to" and attribute.i in low:  # Cast
                    attribute.i = TensorProto.FLOAT

    def widen_graph(graph: Any) -> None:
        for tensor in graph.initializer:
            widen_tensor(tensor)
        for value in list(graph.input) + list(graph.output) + list(graph.value_info):
            widen_type(value)
        widen_nodes(graph.node)

    widen_graph(widened.graph)
    for function in widened.functions:
        widen_nodes(function.node)
    return widened


def _low_precision_types(path: str) -> list[str]:
    """The low-precision element types (``"bfloat16"``, ``"float16"``) of the graph's initializers and values."""
    import onnx

    graph = onnx.load(path, load_external_data=False).graph
    types = {t.data_type for t in graph.initializer}
    for value in list(graph.input) + list(graph.output) + list(graph.value_info):
        if value.type.HasField("tensor_type"):
            types.add(value.type.tensor_type.elem_type)
    names = {onnx.TensorProto.DataType.Name(t) for t in types}
    return [name.lower() for name in ("BFLOAT16", "FLOAT16") if name in names]


def _expected(model: nn.Module, example: Example) -> list[torch.Tensor]:
    with LOCK, example_run(example):
        outputs = example.call(structural_copy(model, clone_buffers=True))
    return [t.detach().cpu() for t in tree_leaves(outputs) if isinstance(t, torch.Tensor)]


def _compare(outputs: list[Any], expected: list[torch.Tensor], rtol: float, atol: float) -> tuple[float, float]:
    if len(expected) != len(outputs):
        raise ExportVerificationError(f"onnxruntime gave {len(outputs)} outputs, PyTorch {len(expected)}")
    worst_abs = worst_rel = 0.0
    for index, (ours, theirs) in enumerate(zip(outputs, expected)):
        got = torch.from_numpy(ours).to(theirs.dtype)
        if got.shape != theirs.shape:
            raise ExportVerificationError(
                f"output {index}: shape {tuple(got.shape)} from onnxruntime, {tuple(theirs.shape)} from PyTorch"
            )
        if not theirs.numel():
            continue
        if theirs.is_floating_point() and theirs.dtype in (torch.float16, torch.bfloat16):
            resolution = 4 * torch.finfo(theirs.dtype).eps
            rtol, atol = max(rtol, resolution), max(atol, resolution)
        diff = (got.double() - theirs.double()).abs()
        worst_abs = max(worst_abs, diff.max().item())
        worst_rel = max(worst_rel, (diff / theirs.double().abs().clamp_min(atol)).max().item())
        scale = max(1.0, theirs.double().abs().max().item())
        if not torch.allclose(got.double(), theirs.double(), rtol=rtol, atol=atol * scale):
            raise ExportVerificationError(
                f"output {index}: onnxruntime differs from PyTorch by up to {diff.max().item():.3g} "
                f"(rtol={rtol}, atol={atol} x output scale {scale:.3g})"
            )
    return worst_abs, worst_rel
