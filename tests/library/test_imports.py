"""What task modules may import: the standard library, psutil, tenacity and dflash_host; never each other.

The worker receives a task module's own source only (its helpers come with the runtime), so a task module
importing another one, or a helper outside dflash_host, would fail on a host.
"""

from __future__ import annotations

import ast
import inspect
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


ROOT = LIBRARY.parent
VLLM = ROOT / "dflash_host" / "vllm"
# Everything outside the vllm package that may reach the server: the task modules and the rest of the host
# package (dflash_host/speed/ among it).
OUTSIDE_VLLM = TASK_MODULES + sorted(p for p in (ROOT / "dflash_host").rglob("*.py") if VLLM not in p.parents)


@pytest.mark.parametrize("path", OUTSIDE_VLLM, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_the_vllm_server_is_reached_only_through_its_front(path):
    parts = sorted(m for m in dflash_host_imports(path) if m.startswith("dflash_host.vllm."))
    assert not parts, (f"{path.relative_to(ROOT)} imports {parts}: import those names from dflash_host.vllm (the front) "
                       "instead, or ask for a name there")


# The front's names (dflash_host/vllm/__init__.py), chosen: what a server is (render, ensure_running, stop,
# status; a cluster node's probe and verify; a measurement server's life), its records and API as speed reads
# them, and what the serving environment's vLLM offers. A new name is a decision made here, not an accident.
FRONT = {
    "render", "ensure_running", "stop", "status", "stop_owner",
    "probe_node", "verify_node", "refuse_one_host",
    "start_measurement", "stop_measurement", "forget_measurement",
    "paths", "read_launch", "read_env", "launch_state",
    "base_url", "request", "spec_decode_counters", "delta", "acceptance", "per_position_counts", "prefix_cache_counters",
    "vllm_facts", "program_unit",
}


def test_the_vllm_front_offers_its_chosen_names_only():
    import dflash_host.vllm

    public = {name for name, value in vars(dflash_host.vllm).items()
              if not name.startswith("_") and not inspect.ismodule(value)}  # the parts are attributes once imported
    assert set(dflash_host.vllm.__all__) == FRONT and len(dflash_host.vllm.__all__) == len(FRONT)
    assert public == FRONT, f"names on the front beyond the chosen ones: {sorted(public - FRONT)}"


def test_the_server_asks_nothing_of_the_speed_package():
    """What vLLM offers is the vllm package's question (dflash_host/vllm/features.py); the server never imports the
    speed measurements (the speed package imports the front, not the other way round)."""
    files = sorted(VLLM.rglob("*.py")) + [LIBRARY / "vllm_server.py", LIBRARY / "vllm_cluster.py", LIBRARY / "vllm_variant.py"]
    found = {p.relative_to(ROOT).as_posix(): sorted(m for m in dflash_host_imports(p) if m.startswith("dflash_host.speed"))
             for p in files}
    assert not {k: v for k, v in found.items() if v}


def test_no_import_renames_a_module_of_the_project():
    """One import convention: names from their module, a module only under its own name (no `as` aliases)."""
    root = ROOT
    renamed = []
    for path in sorted(root.glob("library/*.py")) + sorted((root / "dflash_host").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("dflash_host"):
                renamed += [f"{path.relative_to(root)}: {a.name} as {a.asname}" for a in node.names if a.asname]
    assert not renamed, renamed
