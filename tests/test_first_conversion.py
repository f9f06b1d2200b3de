"""What a fresh process pays for its first conversion: no ``torch._dynamo``, no sympy, unless the model needs them.

``torch._dynamo`` (1-2 s to import) was imported for one isinstance check against ``OptimizedModule``,
and ``torch.fx.experimental.symbolic_shapes`` (0.5-0.7 s, sympy) for a size check that only meets a
SymInt under ``torch.export``, which has imported both by then. Each test runs a fresh interpreter.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_CONVERT = """
import sys
import torch
import fxpool
model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.AdaptiveAvgPool2d(5), torch.nn.AdaptiveMaxPool2d(3))
x = torch.randn(1, 3, 17, 17)
converted = fxpool.convert(model, x)
assert torch.allclose(converted(x), model(x), rtol=1e-6, atol=1e-6)  # assert_close imports sympy
dynamic = fxpool.convert(model, x, dynamic=True)
y = torch.randn(2, 3, 23, 19)
assert torch.allclose(dynamic(y), model(y), rtol=1e-6, atol=1e-6)
print(sorted(name for name in ("torch._dynamo", "sympy", "torch.fx.experimental.symbolic_shapes") if name in sys.modules))
"""


def test_a_first_conversion_imports_neither_dynamo_nor_sympy() -> None:
    run = subprocess.run([sys.executable, "-c", _CONVERT], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip().splitlines()[-1] == "[]", run.stdout


def test_a_compiled_model_is_still_refused_in_a_fresh_process() -> None:
    code = (
        "import torch, fxpool\n"
        "from fxpool.errors import UnsupportedModelError\n"
        "compiled = torch.compile(torch.nn.AdaptiveAvgPool2d(3))\n"
        "try:\n"
        "    fxpool.convert(compiled, torch.randn(1, 2, 7, 7))\n"
        "except UnsupportedModelError as error:\n"
        "    print('refused:', 'model._orig_mod' in str(error))\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip().splitlines()[-1] == "refused: True", run.stdout
