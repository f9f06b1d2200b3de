"""The forms of a MODEL spec (what the command line's MODEL and :func:`fxpool.loading.load_model` read) and what
each may run, in one table for the CLI's help and the loader's errors. Imports nothing: ``fxpool --help`` stays
light."""

from __future__ import annotations

import textwrap

# (forms, a note for MODEL's one-line help, what the form builds and may run)
MODEL_SPECS: tuple[tuple[tuple[str, ...], str, str], ...] = (
    (("torchvision:NAME",), "", "torchvision's builder; random weights, or --weights DEFAULT"),
    (("timm:NAME",), "", "timm's builder; random weights, or --pretrained from the local cache (nothing is downloaded)"),
    (
        ("hf:ID_OR_FOLDER",),
        "",
        "a transformers model from a local folder or the local cache: its config, and its weights with --pretrained "
        "(no remote code)",
    ),
    (
        ("package.module:callable", "path/to/file.py:callable"),
        "",
        "your code, imported and called with no arguments (a module in the current folder is found too)",
    ),
    (
        ("FILE.pt2",),
        "a torch.export program",
        "a program saved by torch.export.save (no --input-shape needed); its pickles are read by PyTorch's "
        "weights-only unpickler first, so no code of the file's runs",
    ),
    (
        ("FILE.pt",),
        "a whole pickled model: only with --trust-model-file",
        "read with torch.load(weights_only=True); a whole pickled model runs code from the file while it loads, so "
        "it is refused unless you pass --trust-model-file",
    ),
)
FORM_COLUMN = 26  # the width of the forms' column in :func:`spec_table`: the longest form and two spaces


def spec_forms(with_notes: bool = False) -> str:
    """Every form in one line, the last after "or" (``with_notes``: each followed by its note in parentheses)."""
    parts = [
        f"{form} ({note})" if with_notes and note and form == forms[-1] else form
        for forms, note, _ in MODEL_SPECS
        for form in forms
    ]
    return ", ".join(parts[:-1]) + " or " + parts[-1]


def spec_table(width: int = 80) -> str:
    """Each form and what it builds and may run, two columns within ``width``, for the CLI's description."""
    lines = []
    for forms, _, description in MODEL_SPECS:
        wrapped = textwrap.wrap(description, width - FORM_COLUMN - 2, break_on_hyphens=False)
        for row in range(max(len(forms), len(wrapped))):
            form = forms[row] if row < len(forms) else ""
            text = wrapped[row] if row < len(wrapped) else ""
            lines.append(f"  {form:<{FORM_COLUMN}}{text}")
    return "\n".join(line.rstrip() for line in lines)
