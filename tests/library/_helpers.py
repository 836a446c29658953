"""What the module tests share: load a library module, call its run(), run it by hand, snapshot a tree.

Imported by the test files beside it (tests/library/conftest.py puts this folder on sys.path).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

LIB = Path(__file__).resolve().parents[2] / "library"

from _common import Context, check_args  # noqa: E402


def load_module(name: str) -> ModuleType:
    """library/NAME.py as module dfp_library_NAME (never NAME: copy and stat are stdlib names)."""
    spec = importlib.util.spec_from_file_location(f"dfp_library_{name}", LIB / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_module(module: ModuleType, args: dict, check: bool = False, diff: bool = False, warnings: bool = False) -> dict:
    """The module's run() on checked args, as the contract calls it; the result must be JSON-serialisable.

    warnings: copy the Context's warnings into the result (as the contract's execute() does).
    """
    name = module.__name__.removeprefix("dfp_library_")
    ctx = Context(check=check, diff=diff)
    result = module.run(check_args(module.ARGS, args, name), ctx)
    json.dumps(result)
    if warnings and ctx.warnings:
        result["warnings"] = ctx.warnings
    return result


def run_by_hand(name: str, tmp_path: Path, args: dict, *flags: str, quiet: bool = True) -> tuple[int, dict]:
    """`python3 library/NAME.py ARGS.json FLAGS` with args written to tmp_path/args.json: (rc, result).

    quiet: assert the module wrote nothing to stderr.
    """
    args_file = tmp_path / "args.json"
    args_file.write_text(json.dumps(args))
    proc = subprocess.run(
        [sys.executable, str(LIB / f"{name}.py"), str(args_file), *flags],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if quiet:
        assert proc.stderr == ""
    return proc.returncode, json.loads(proc.stdout)


def snapshot(root: Path, files_only: bool = False) -> dict:
    """Every path under root with its mode and content (None for a folder): compare before/after.

    files_only: regular files only, with the mode of what a symlink points to.
    """
    if files_only:
        return {str(p.relative_to(root)): (p.stat().st_mode, p.read_bytes()) for p in sorted(root.rglob("*")) if p.is_file()}
    out = {}
    for p in sorted(root.rglob("*")):
        st = p.lstat()
        out[str(p.relative_to(root))] = (st.st_mode, p.read_bytes() if p.is_file() else None)
    return out
