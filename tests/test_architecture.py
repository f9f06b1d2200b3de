"""The layering of ARCHITECTURE.md, enforced: each fxpool module imports only what its layer may."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "fxpool"
FOUNDATIONS = {"errors", "copying", "globalstate", "loading", "modelspecs", "writing"}
ALLOWED: dict[str, set[str]] = {
    "windows": set(),
    "steps": set(),
    "planning": {"windows", "steps"},
    "guards": {"planning", "steps"},
    "errors": set(),
    "copying": set(),
    "globalstate": {"errors"},
    "modelspecs": set(),
    "loading": {"errors", "modelspecs"},
    "writing": {"errors"},
    "calls": {"errors", "steps"},
    "example": {"errors"},
    "sizechecks": {"errors"},
    "forms": {"errors", "sizechecks", "steps", "windows"},
    "replacements": {"errors", "forms", "planning", "sizechecks", "steps", "windows"},
    "onnxnodes": {"errors", "forms", "planning", "sizechecks", "steps", "windows", "replacements"},
    "tiling": {"errors", "forms", "planning", "sizechecks", "steps", "windows", "replacements", "onnxnodes"},
    "dynamic": {"errors", "forms", "planning", "sizechecks", "steps", "windows", "replacements", "onnxnodes", "tiling"},
    "indices": {"errors", "forms", "planning", "sizechecks", "steps", "windows", "replacements"},
}
GRAPH_WORK = set().union(*ALLOWED.values(), ALLOWED) | {"recording", "intercepting", "checking", "report", "proving"}
ALLOWED["recording"] = ALLOWED["intercepting"] = ALLOWED["checking"] = ALLOWED["report"] = ALLOWED["proving"] = GRAPH_WORK
# The conversion's stages, in pipeline order: each may import the stages before it.
ALLOWED["finding"] = set(ALLOWED["recording"])
ALLOWED["deciding"] = ALLOWED["finding"] | {"finding"}
ALLOWED["building"] = ALLOWED["deciding"] | {"deciding"}
ALLOWED["programs"] = ALLOWED["building"] | {"building"}  # the torch.export pass: beside the stages, below convert
ALLOWED["convert"] = ALLOWED["programs"] | {"programs"}
ALLOWED["symbolics"] = ALLOWED["convert"] | {"convert"}
ALLOWED["verifying"] = ALLOWED["symbolics"]
ALLOWED["exporting"] = ALLOWED["symbolics"] | {"symbolics", "verifying"}
ALLOWED["hooking"] = ALLOWED["exporting"] | {"exporting"}
ALLOWED["cli"] = ALLOWED["__init__"] = ALLOWED["__main__"] = ALLOWED["hooking"] | {"hooking", "cli", "__init__"}
FORBIDDEN_THIRD_PARTY: dict[str, tuple[str, ...]] = {
    "windows": ("torch",),
    "planning": ("torch",),
    "steps": ("torch",),
    "guards": ("torch",),
    "modelspecs": ("torch",),
    **{
        m: ("onnx", "onnxruntime", "onnxscript")
        for m in (
            "calls",
            "example",
            "replacements",
            "onnxnodes",
            "tiling",
            "dynamic",
            "indices",
            "forms",
            "sizechecks",
            "recording",
            "intercepting",
            "checking",
            "report",
            "proving",
            "finding",
            "deciding",
            "building",
            "convert",
            "programs",
            "copying",
            "globalstate",
            "errors",
            "writing",
        )
    },
    "calls.fx": ("torch.fx",),
    "example.fx": ("torch.fx",),
}


def imports_of(module: str) -> tuple[set[str], set[str]]:
    """(fxpool modules, other modules) that ``fxpool/<module>.py`` imports anywhere in its code."""
    tree = ast.parse((PACKAGE / f"{module}.py").read_text())
    ours, theirs = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            name = node.module or ""
            if node.level or name == "fxpool" or name.startswith("fxpool."):
                if name in ("", "fxpool"):
                    ours.update(alias.name for alias in node.names)
                else:
                    ours.add(name.removeprefix("fxpool."))
            else:
                theirs.add(name)
                theirs.update(f"{name}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                (ours.add("__init__") if alias.name == "fxpool" else theirs.add(alias.name))
    return ours, theirs


def test_every_module_has_a_layer() -> None:
    assert {p.stem for p in PACKAGE.glob("*.py")} == set(ALLOWED)


@pytest.mark.parametrize("module", sorted(ALLOWED))
def test_imports_follow_the_layers(module: str) -> None:
    ours, theirs = imports_of(module)
    assert ours - {module} <= ALLOWED[module], f"{module} imports {sorted(ours - ALLOWED[module] - {module})}"
    for key in (module, f"{module}.fx"):
        for banned in FORBIDDEN_THIRD_PARTY.get(key, ()):
            hits = {name for name in theirs if name == banned or name.startswith(banned + ".")}
            if banned == "torch.fx":  # `from torch import fx` reads as torch.fx
                hits |= {name for name in theirs if name == "torch.fx"}
            assert not hits, f"{module} imports {sorted(hits)}"


def test_the_package_never_imports_the_zoo_but_for_the_cli() -> None:
    for path in PACKAGE.glob("*.py"):
        _, theirs = imports_of(path.stem)
        if any(name.startswith("model_zoo_checks") for name in theirs):
            assert path.stem == "cli"


TEST_FILE_OF = {
    "example": "test_example_inputs",
    "exporting": "test_export",
    "__main__": "test_cli",
    "forms": "test_window_forms",
}  # the rest: test_<module>


def test_every_module_has_its_test_file() -> None:
    tests = {p.stem for p in Path(__file__).parent.glob("test_*.py")}
    missing = [m for m in ALLOWED if m != "__init__" and TEST_FILE_OF.get(m, f"test_{m}") not in tests]
    assert not missing, missing
