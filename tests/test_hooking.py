"""The pre-export hook and the routing of torch.onnx.export: ``onnx_export_hook`` converts in the thread that
entered it, restores the exporter in any order, and fxpool's exports run beside other threads' plain ones."""

from __future__ import annotations

import pytest
import torch
import torchvision
from test_export import ExportTimePool, pooled
from torch import nn

import fxpool
from fxpool.verifying import op_histogram, run_onnxruntime


def test_hook_exports_the_converted_model_and_restores_the_exporter(tmp_path) -> None:
    model = torchvision.models.alexnet(weights=None).eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    original = torch.onnx.export
    x = torch.randn(1, 3, 160, 160)
    with fxpool.onnx_export_hook():
        with fxpool.onnx_export_hook():  # nesting is safe
            torch.onnx.export(model, (x,), str(tmp_path / "hooked.onnx"), dynamo=False)
        assert torch.onnx.export is not original
    assert torch.onnx.export is original
    with fxpool.onnx_export_hook():  # fxpool.export inside the hook enters the translations twice
        fxpool.export(model, x, tmp_path / "both.onnx", dynamo=False)
        fxpool.export(ExportTimePool(), torch.randn(1, 3, 10, 10), tmp_path / "again.onnx", dynamo=False)
    with pytest.raises(RuntimeError, match="inside"):
        with fxpool.onnx_export_hook():
            raise RuntimeError("inside")
    assert torch.onnx.export is original
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    (out,) = run_onnxruntime(str(tmp_path / "hooked.onnx"), (x,))
    torch.testing.assert_close(torch.from_numpy(out), model(x), rtol=1e-4, atol=1e-5)


def test_the_hook_is_per_thread_and_restores_the_exporter_in_any_order(tmp_path) -> None:
    import threading

    original = torch.onnx.export
    plain_graphs: list[dict[str, int]] = []
    entered, release = threading.Barrier(3), threading.Event()

    def hooked(i: int) -> None:
        with fxpool.onnx_export_hook():
            entered.wait()
            release.wait(30)  # the plain export below runs while both hooks are held, but not beside an export
            torch.onnx.export(pooled((7, 7)), (torch.randn(1, 3, 10, 10),), str(tmp_path / f"h{i}.onnx"), dynamo=False)

    threads = [threading.Thread(target=hooked, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    entered.wait()
    # While both hooks are held, this thread's plain export is not converted: the stock
    # TorchScript exporter still refuses 10 -> 7.
    with pytest.raises(Exception, match="(?i)not factor|unsupported"):
        torch.onnx.export(pooled((7, 7)), (torch.randn(1, 3, 10, 10),), str(tmp_path / "plain.onnx"), dynamo=False)
    release.set()
    for thread in threads:
        thread.join()
    assert torch.onnx.export is original
    plain_graphs += [op_histogram(str(tmp_path / f"h{i}.onnx")) for i in range(2)]
    assert all("Gather" in graph and "Div" in graph for graph in plain_graphs)  # 10 -> 7: window sums
    first, second = fxpool.onnx_export_hook(), fxpool.onnx_export_hook()
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)  # left out of order
    assert torch.onnx.export is not original
    second.__exit__(None, None, None)
    assert torch.onnx.export is original


def test_exports_run_beside_other_threads_plain_exports(tmp_path) -> None:
    """The TorchScript exporter asserts on process-wide flags: fxpool's exports and the hook's wait for another
    thread's export in flight and route the others through their lock, so neither side fails."""
    import io
    import threading

    model = nn.Sequential(nn.Conv2d(3, 32, 3), nn.AdaptiveAvgPool2d((5, 3))).eval()
    other = nn.Sequential(nn.Conv2d(3, 32, 3), nn.AdaptiveAvgPool2d(1)).eval()
    x = torch.randn(1, 3, 24, 24)
    stop, failures, plain_exports = threading.Event(), [], []

    def plain() -> None:
        while not stop.is_set():
            try:
                torch.onnx.export(other, (x,), io.BytesIO(), dynamo=False)
                plain_exports.append(1)
            except Exception as error:  # recorded: the assertion below names it
                failures.append(f"plain: {error!r}")

    thread = threading.Thread(target=plain)
    thread.start()
    try:
        for index in range(3):
            fxpool.export(model, x, tmp_path / f"m{index}.onnx", dynamo=False)
            with fxpool.onnx_export_hook():
                torch.onnx.export(model, (x,), io.BytesIO(), dynamo=False)
    finally:
        stop.set()
        thread.join()
    assert not failures and plain_exports, failures[:3]
    assert not getattr(torch.onnx.export, "fxpool_stand_in", False)  # the patch is gone
