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
    ],
)
def test_every_error_is_an_fxpool_error_and_its_builtin_kind(error: type, builtin: type) -> None:
    assert issubclass(error, errors.FxpoolError) and issubclass(error, builtin)
    assert getattr(fxpool, error.__name__) is error  # all public


def test_error_summary_is_the_type_and_the_first_line() -> None:
    assert errors.error_summary(ValueError("bad size\nmore detail")) == "ValueError: bad size"
    assert errors.error_summary(KeyError()) == "KeyError:"
