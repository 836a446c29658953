"""What the module tests share: load a library module, call its run(), run it by hand, snapshot a tree, a live PID.

Imported by the test files beside it (tests/library/conftest.py puts this folder on sys.path).
"""

from __future__ import annotations

import http.server
import importlib
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from dflash_host.module import Context, check_args

ROOT = Path(__file__).resolve().parents[2]


def load_module(name: str) -> ModuleType:
    """The task module library/NAME.py, as library.NAME (so copy and stat never shadow the stdlib's)."""
    return importlib.import_module(f"library.{name}")


def run_module(module: ModuleType, args: dict, check: bool = False, diff: bool = False, warnings: bool = False) -> dict:
    """The module's run() on checked args, as the contract calls it; the result must be JSON-serialisable.

    warnings: copy the Context's warnings into the result (as the contract's execute() does).
    """
    name = module.__name__.rpartition(".")[2]
    ctx = Context(check=check, diff=diff)
    result = module.run(check_args(module.ARGS, args, name), ctx)
    json.dumps(result)
    if warnings and ctx.warnings:
        result["warnings"] = ctx.warnings
    return result


def run_by_hand(name: str, tmp_path: Path, args: dict, *flags: str, quiet: bool = True) -> tuple[int, dict]:
    """`python3 -m library.NAME ARGS.json FLAGS` from the repository root, with args written to tmp_path/args.json:
    (rc, result).

    quiet: assert the module wrote nothing to stderr.
    """
    args_file = tmp_path / "args.json"
    args_file.write_text(json.dumps(args))
    proc = subprocess.run(
        [sys.executable, "-m", f"library.{name}", str(args_file), *flags],
        cwd=ROOT,
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


def alive(pid: int) -> bool:
    """The process runs (a zombie does not count)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


class ReplyingHandler(http.server.BaseHTTPRequestHandler):
    """A real HTTP server's handler for the uri tests: `_reply` sends a status, a body and headers, and does not
    mind a client that gave up (a timeout case)."""

    def log_message(self, *args):
        pass

    def _reply(self, code: int, body: bytes, ctype: str | None = "text/plain", extra: dict | None = None):
        try:
            self.send_response(code)
            if ctype:
                self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            for k, v in (extra or {}).items():
                self.send_header(k, v)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass
