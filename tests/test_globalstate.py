"""fxpool.globalstate: the stand-in of is_in_onnx_export refuses branches in one thread only, and is removed."""

from __future__ import annotations

import threading

import pytest
import torch

from fxpool.globalstate import ExportBranchError, is_stand_in, refusing_export_branches


def test_refuses_in_this_thread_and_answers_in_others() -> None:
    seen = {}
    with refusing_export_branches():
        with pytest.raises(ExportBranchError, match="branches on torch.onnx.is_in_onnx_export"):
            torch.onnx.is_in_onnx_export()
        other = threading.Thread(target=lambda: seen.update(value=torch.onnx.is_in_onnx_export()))
        other.start()
        other.join()
    assert seen == {"value": False}
    assert not is_stand_in(torch.onnx.is_in_onnx_export) and torch.onnx.is_in_onnx_export() is False


def test_nested_sections_unwind_and_errors_restore_the_original() -> None:
    original = torch.onnx.is_in_onnx_export
    with pytest.raises(RuntimeError, match="inner"):
        with refusing_export_branches(), refusing_export_branches():
            raise RuntimeError("inner")
    assert torch.onnx.is_in_onnx_export is original
