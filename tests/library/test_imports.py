"""What task modules may import: the standard library, psutil, tenacity and dflash_host; never each other.

The worker receives a task module's own source only (its helpers come with the runtime), so a task module
importing another one, or a helper outside dflash_host, would fail on a host.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

LIBRARY = Path(__file__).resolve().parents[2] / "library"
ALLOWED = set(sys.stdlib_module_names) | {"psutil", "tenacity", "dflash_host"}
TASK_MODULES = sorted(p for p in LIBRARY.glob("*.py") if p.name != "__init__.py")


def imported_names(path: Path) -> set[str]:
    """Top-level names of every import in the file (nested ones too); relative imports as '.'."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            names.add("." if node.level else (node.module or "").split(".")[0])
    return names


@pytest.mark.parametrize("path", TASK_MODULES, ids=lambda p: p.stem)
def test_a_task_module_imports_helpers_only_from_dflash_host(path):
    assert imported_names(path) - ALLOWED == set()
