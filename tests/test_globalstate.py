"""fxpool.globalstate: the stand-in of is_in_onnx_export answers in one thread only, counts, and is removed."""

from __future__ import annotations

import threading

import pytest
import torch

from fxpool.globalstate import ExportBranchError, export_flag


def is_stand_in(value: object) -> bool:
    """Whether ``value`` is fxpool's stand-in of ``is_in_onnx_export`` (it keeps the original beside it)."""
    return hasattr(value, "fxpool_original")


def _answer_elsewhere() -> dict[str, bool]:
    seen: dict[str, bool] = {}
    other = threading.Thread(target=lambda: seen.update(value=torch.onnx.is_in_onnx_export()))
    other.start()
    other.join()
    return seen


@pytest.mark.parametrize("answer", [True, False])
def test_answers_in_this_thread_counts_the_questions_and_leaves_other_threads_alone(answer: bool) -> None:
    with export_flag(answer) as reads:
        assert torch.onnx.is_in_onnx_export() is answer
        assert torch.onnx.is_in_onnx_export() is answer
        assert _answer_elsewhere() == {"value": False}
    assert reads.count == 2
    assert not is_stand_in(torch.onnx.is_in_onnx_export) and torch.onnx.is_in_onnx_export() is False


def test_refuses_where_no_branch_may_be_taken() -> None:
    with export_flag(None) as reads:
        with pytest.raises(ExportBranchError, match="branches on torch.onnx.is_in_onnx_export"):
            torch.onnx.is_in_onnx_export()
    assert reads.count == 1


def test_nested_sections_answer_innermost_and_errors_restore_the_original() -> None:
    original = torch.onnx.is_in_onnx_export
    with pytest.raises(RuntimeError, match="inner"):
        with export_flag(False) as outer:
            with export_flag(True) as inner:
                assert torch.onnx.is_in_onnx_export() is True
            assert torch.onnx.is_in_onnx_export() is False
            raise RuntimeError("inner")
    assert (outer.count, inner.count) == (1, 1)
    assert torch.onnx.is_in_onnx_export is original


def test_dynamo_tables_built_while_the_flag_is_answered_are_forgotten_after_it() -> None:
    """Dynamo caches its table of torch functions at first use; built under fxpool's stand-in it held the stand-in,
    and a later torch.export(strict=True) of code asking torch.onnx.is_in_onnx_export() failed ("marked as skipped")
    in whichever test ran after one that first traced with Dynamo inside a conversion."""
    import torch._dynamo.trace_rules as trace_rules
    import torch._dynamo.variables.torch as variables

    class AsksTheFlag(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x if torch.onnx.is_in_onnx_export() else x + 1

    variables.tracing_state_functions.cache_clear()
    trace_rules.get_torch_obj_rule_map.cache_clear()
    with export_flag(True):
        variables.tracing_state_functions()
        trace_rules.get_torch_obj_rule_map()
    assert torch.onnx.is_in_onnx_export in variables.tracing_state_functions()
    x = torch.randn(2)
    torch.testing.assert_close(torch.export.export(AsksTheFlag(), (x,), strict=True).module()(x), x + 1)
