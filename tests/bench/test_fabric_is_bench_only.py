"""Fabric is a benchmark package, not the tool's (docs/ARCHITECTURE.md; measured: docs/BENCHMARKS.md, "Fabric's
Connection or the engine's paramiko"): no runtime code imports it, requirements.txt does not install it, and
`invoke bench` without it says what to install instead of failing section by section."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from bench import run

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = ("engine", "dfp_cli", "library", "dflash_host", "tasks.py")
IMPORTS_FABRIC = re.compile(r"^\s*(?:import\s+fabric\b|from\s+fabric\b)", re.M)


def _requirement_names(path: Path) -> set[str]:
    names = set()
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            names.add(re.split(r"[<>=!~;\[ ]", line, maxsplit=1)[0].lower())
    return names


def test_no_runtime_code_imports_fabric():
    files = [p for name in RUNTIME for p in ([ROOT / name] if name.endswith(".py") else (ROOT / name).rglob("*.py"))]
    assert files
    assert [str(p.relative_to(ROOT)) for p in files if IMPORTS_FABRIC.search(p.read_text(encoding="utf-8"))] == []


def test_fabric_is_a_test_and_bench_requirement_only():
    assert "fabric" not in _requirement_names(ROOT / "requirements.txt")
    assert {"invoke", "paramiko"} <= _requirement_names(ROOT / "requirements.txt")
    assert "fabric" in _requirement_names(ROOT / "requirements-test.txt")


def test_bench_without_fabric_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "fabric", None)  # `import fabric` raises ImportError
    why = run.missing_packages(run.parse_args(["--quick"]))
    assert why and "requirements-test.txt" in why and "peers, fleet" in why
    assert run.missing_packages(run.parse_args(["--only", "header,latency"])) is None
    assert run.main(["--quick", "--no-docs", "--out", "/nonexistent/never-written.json"]) == 2
