"""fxpool.report: the records of a conversion, what they count, and how they print."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

import fxpool
from fxpool import report_of


class Mixed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.sliding = nn.AdaptiveAvgPool2d(7)
        self.mean = nn.AdaptiveAvgPool2d(1)
        self.uniform = nn.AdaptiveAvgPool2d(5)
        self.indices = torch.jit.script(nn.AdaptiveMaxPool2d(4, return_indices=True))  # left: fxpool cannot see inside

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.sliding(x).sum() + self.mean(x).sum() + self.uniform(x).sum() + self.indices(x)[0].sum()


@pytest.fixture(scope="module")
def report() -> fxpool.ConversionReport:
    return report_of(fxpool.convert(Mixed(), torch.randn(1, 2, 10, 10)))


def test_counts_by_kind_and_unconverted(report) -> None:
    assert report.counts() == {"sliding": 1, "mean": 1, "AvgPool2d": 1, "unconverted": 1}
    assert [r.location for r in report.converted] == ["sliding", "mean", "uniform"]
    assert [r.location for r in report.unconverted] == ["indices"]
    assert [r.family for r in report.records] == ["avg", "avg", "avg", "max"]


def test_the_unexportable_are_the_unconverted_max_pools(report) -> None:
    # left average pools are lowered exactly at export time; a left max pool is not
    assert [r.location for r in report.unexportable] == ["indices"]


def test_table_and_summary_name_every_pool_and_why(report) -> None:
    table = report.table()
    for text in (
        "sliding",
        "sliding H 10->7 (k=2,3) -> sliding W 10->7 (k=2,3)",
        "mean(H,W)",
        "AvgPool2d(k=(2, 2), s=(2, 2))",
        "left to PyTorch",
        "TorchScript",
        "1x2x10x10",
    ):
        assert text in table, text
    assert "4 adaptive pool(s): 3 converted, 1 left to PyTorch" in report.summary()
    assert " ".join(str(report).split()).startswith(report.summary())  # the summary first, wrapped


def test_to_dict_is_json_with_every_record(report) -> None:
    data = json.loads(json.dumps(report.to_dict()))
    assert [r["kind"] for r in data["records"]] == ["sliding", "mean", "AvgPool2d", ""]
    assert data["intercepted"] == [] and data["check"]["status"] == "passed"  # pool modules only: nothing intercepted
    assert [r["calls"] for r in data["records"]] == [1, 1, 1, 0]  # the scripted pool: no call the recording saw


def test_report_of_a_module_fxpool_did_not_make_says_so() -> None:
    with pytest.raises((TypeError, ValueError), match="convert"):
        report_of(nn.Linear(2, 2))


def test_records_name_the_form_onnx_export_runs_where_it_has_its_own(report: fxpool.ConversionReport) -> None:
    records = {r.location: r for r in report.records}
    assert records["sliding"].onnx_replacement.startswith("spatial axes first -> zero after H,W -> window-sum H 10->7")
    assert records["mean"].onnx_replacement == records["uniform"].onnx_replacement == ""  # ONNX runs the steps
    assert records["indices"].onnx_replacement == ""  # left to PyTorch
    assert "    in ONNX      spatial axes first" in report.table()
    blocks = report_of(fxpool.convert(nn.AdaptiveAvgPool2d(2), torch.randn(1, 2, 64, 64))).records[0]
    assert blocks.onnx_replacement == "block-sum H 64->2 (k=32) -> block-sum W 64->2 (k=32) -> divide by window sizes"
    program = torch.export.export(nn.AdaptiveMaxPool2d(2).eval(), (torch.randn(1, 2, 64, 64),))
    aten = report_of(fxpool.convert(program)).records[0]
    assert aten.onnx_replacement == "block-max H 64->2 (k=32) -> block-max W 64->2 (k=32)"


class Wrapper(nn.Module):
    def __init__(self, inner: nn.Module, name: str) -> None:
        super().__init__()
        self.name = name
        self.add_module(name, inner)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return getattr(self, self.name)(x)


class Deep(nn.Module):
    """A pool under a module name longer than two terminal lines, and one left to PyTorch."""

    def __init__(self) -> None:
        super().__init__()
        tower: nn.Module = nn.AdaptiveAvgPool2d(7)
        for depth in range(12):
            tower = Wrapper(tower, f"a_rather_long_block_name_{depth}")
        self.tower = tower
        self.indices = torch.jit.script(nn.AdaptiveMaxPool2d(4, return_indices=True))  # left: fxpool cannot see inside

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.tower(x).sum() + self.indices(x)[0].sum()


def test_the_printed_report_fits_100_columns_and_the_dict_keeps_every_text_whole() -> None:
    report = report_of(fxpool.convert(Deep(), torch.randn(1, 2, 10, 10)))
    deep = report.records[0]
    assert len(deep.location) > 200 and len(deep.reason) > 100  # what would not fit
    printed = str(report)
    assert max(len(line) for line in printed.splitlines()) <= fxpool.report.REPORT_WIDTH == 100
    assert max(len(line) for line in report.table(width=60).splitlines()) <= 60
    # every word of the location, the replacement and the reason is printed, wrapped not cut
    assert "".join(printed.split()).count("".join(deep.reason.split())) == 1
    assert "".join(deep.location.split()) in "".join(printed.split())
    data = report.to_dict()
    assert data["records"][0]["location"] == deep.location and data["records"][0]["reason"] == deep.reason
    assert "(!)" in printed  # the pool left to PyTorch is marked


def test_each_pool_opens_its_block_unindented_with_its_details_under_labels(report: fxpool.ConversionReport) -> None:
    lines = report.table().splitlines()
    heads = [line for line in lines if not line.startswith(" ")]
    assert [h.split()[0] for h in heads] == [r.location for r in report.records]
    assert heads[0] == "sliding  nn.AdaptiveAvgPool2d  1x2x10x10 -> (7, 7)"
    labels = {line.split()[0] for line in lines if line.startswith("    ") and not line.startswith("     ")}
    assert labels == {"replacement", "in", "why"}
