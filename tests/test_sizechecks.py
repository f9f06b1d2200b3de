"""fxpool.sizechecks: what a replacement checks of its input, and what says where it runs.

``check_input`` passes the traced size and refuses another (``SpatialSizeError`` naming both sizes and
``dynamic=True``), an integer input and an empty spatial axis (``PoolCallError``); an empty batch under
the TorchScript ONNX exporter is refused before the exporter's Reshape symbolic would crash the process.
``plain_eager`` answers as its name says, ``traced_forms`` included.
"""

from __future__ import annotations

import pytest
import torch

from fxpool.errors import PoolCallError, SpatialSizeError
from fxpool.sizechecks import check_input, plain_eager, refuse_empty_torchscript_export, traced_forms


def test_check_input_passes_the_traced_size_and_names_both_sizes_otherwise() -> None:
    x = torch.randn(1, 3, 10, 7)
    assert check_input(x, (10, 7), "features.5") is x
    assert check_input(x, (None, 7), "features.5") is x  # None: any size on that axis
    with pytest.raises(
        SpatialSizeError, match=r"'features.5'.*specialised for spatial size \(10, 8\).*\(1, 3, 10, 7\).*dynamic=True"
    ):
        check_input(x, (10, 8), "features.5")


def test_check_input_refuses_integer_input_and_an_empty_spatial_axis() -> None:
    with pytest.raises(PoolCallError, match="dtype torch.int64.*floating"):
        check_input(torch.ones(1, 3, 10, 7, dtype=torch.int64), (10, 7), "pool")
    with pytest.raises(PoolCallError, match="empty spatial axis"):
        check_input(torch.randn(1, 3, 0, 7), (None, 7), "pool")
    assert check_input(torch.randn(0, 3, 10, 7), (10, 7), "pool").shape == (0, 3, 10, 7)  # an empty batch is fine


def test_an_empty_input_under_the_torchscript_exporter_is_refused_by_name() -> None:
    refuse_empty_torchscript_export(torch.randn(1, 3, 4, 4), "pool")  # not empty: nothing to say
    with pytest.raises(PoolCallError, match=r"'pool'.*TorchScript ONNX exporter cannot take an input of shape \(0, 3, 4, 4\)"):
        refuse_empty_torchscript_export(torch.randn(0, 3, 4, 4), "pool")


def test_where_a_replacement_runs() -> None:
    assert plain_eager()
    with traced_forms():
        assert not plain_eager()
    assert plain_eager()
