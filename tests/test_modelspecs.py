"""The MODEL spec forms: one table, read by the CLI's help and the loader's errors."""

from __future__ import annotations

import pytest

from fxpool.modelspecs import MODEL_SPECS, spec_forms, spec_table

FORMS = [form for forms, _, _ in MODEL_SPECS for form in forms]


def test_every_form_is_in_the_one_line_and_in_the_table_within_80_columns() -> None:
    line, table = spec_forms(), spec_table()
    assert all(form in line for form in FORMS) and line.endswith(f" or {FORMS[-1]}")
    assert all(f"  {form} " in table for form in FORMS)
    assert max(len(row) for row in table.splitlines()) <= 80, table
    assert "(a whole pickled model: only with --trust-model-file)" in spec_forms(with_notes=True)


def test_the_cli_help_and_the_loader_error_name_every_form(capsys) -> None:
    from fxpool.cli import main
    from fxpool.loading import ModelSpecError, load_model

    with pytest.raises(SystemExit):
        main(["--help"])
    help_text = capsys.readouterr().out
    with pytest.raises(ModelSpecError) as refused:
        load_model("alexnet")
    assert all(form in help_text and form in str(refused.value) for form in FORMS)
