"""fxpool.errors: one base class to catch, the built-in kinds each error also is, and the summaries."""

from __future__ import annotations

import pytest

import fxpool
from fxpool import errors


@pytest.mark.parametrize(
    "error,builtin",
    [
        (errors.ExampleInputError, ValueError),
        (errors.PoolCallError, ValueError),
        (errors.SpatialSizeError, ValueError),
        (errors.UnsupportedModelError, TypeError),
        (errors.SpecialisedArgumentError, ValueError),
        (errors.ExportFailedError, RuntimeError),
        (errors.UnconvertedPoolError, Exception),
        (errors.SelfCheckError, Exception),
        (errors.ExportVerificationError, Exception),
        (errors.MissingDependencyError, ImportError),
        (errors.UnsupportedOpsetError, ValueError),
    ],
)
def test_every_error_is_an_fxpool_error_and_its_builtin_kind(error: type, builtin: type) -> None:
    assert issubclass(error, errors.FxpoolError) and issubclass(error, builtin)
    assert getattr(fxpool, error.__name__) is error  # all public


def test_error_summary_is_the_type_and_the_first_line() -> None:
    assert errors.error_summary(ValueError("bad size\nmore detail")) == "ValueError: bad size"
    assert errors.error_summary(KeyError()) == "KeyError:"


def test_require_names_the_failed_import_and_the_pip_line(monkeypatch) -> None:
    monkeypatch.setitem(__import__("sys").modules, "onnxscript", None)  # as if not installed
    with pytest.raises(errors.MissingDependencyError) as raised:
        errors.require("onnxscript", "fxpool.export with dynamo=True")
    message = str(raised.value)
    assert (
        "needs onnxscript, which failed to import" in message
        and 'pip install onnx onnxruntime onnxscript (the packages of fxpool\'s "onnx" extra' in message
    ), message
    errors.require("torch", "anything")  # present: no error


def test_a_non_strict_convert_warns_of_the_pools_it_leaves_and_a_strict_one_raises() -> None:
    import torch
    from torch import nn

    model = nn.Sequential(nn.AdaptiveMaxPool2d(3, return_indices=True)).eval()  # left under dynamic=True: indices asked for
    x = torch.randn(1, 2, 7, 7)
    with pytest.warns(errors.UnconvertedPoolWarning, match=r"1 adaptive pool\(s\) are left to PyTorch \(0: .*return_indices"):
        fxpool.convert(model, x, dynamic=True)
    with pytest.raises(errors.UnconvertedPoolError):
        fxpool.convert(model, x, strict=True, dynamic=True)
    assert issubclass(errors.UnconvertedPoolWarning, fxpool.FxpoolWarning) and issubclass(fxpool.FxpoolWarning, UserWarning)


def test_a_converted_model_warns_of_nothing_and_logs_each_decision(caplog, recwarn) -> None:
    import logging

    import torch
    from torch import nn

    with caplog.at_level(logging.DEBUG, logger="fxpool"):
        fxpool.convert(nn.Sequential(nn.AdaptiveAvgPool2d(3)).eval(), torch.randn(1, 2, 7, 7))
    assert not [w for w in recwarn if issubclass(w.category, fxpool.FxpoolWarning)]
    messages = [(r.name, r.levelname, r.getMessage()) for r in caplog.records if r.name == "fxpool"]
    assert ("fxpool", "DEBUG") in {(n, level) for n, level, _ in messages}
    assert any(level == "INFO" and "converted 1 of 1 adaptive pool(s); self-check passed" in m for _, level, m in messages), (
        messages
    )
