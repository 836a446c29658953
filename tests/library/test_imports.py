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


def dflash_host_imports(path: Path) -> set[str]:
    """The dflash_host modules a file imports from (`from dflash_host.vllm.log import x` gives dflash_host.vllm.log)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("dflash_host"):
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("dflash_host")}
    return found


@pytest.mark.parametrize("path", TASK_MODULES, ids=lambda p: p.stem)
def test_a_task_module_reaches_the_vllm_server_only_through_its_front(path):
    parts = sorted(m for m in dflash_host_imports(path) if m.startswith("dflash_host.vllm."))
    assert not parts, f"{path.name} imports {parts}: import those names from dflash_host.vllm (the front) instead"


def test_no_import_renames_a_module_of_the_project():
    """One import convention: names from their module, a module only under its own name (no `as` aliases)."""
    root = LIBRARY.parent
    renamed = []
    for path in sorted(root.glob("library/*.py")) + sorted((root / "dflash_host").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("dflash_host"):
                renamed += [f"{path.relative_to(root)}: {a.name} as {a.asname}" for a in node.names if a.asname]
    assert not renamed, renamed
