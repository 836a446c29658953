"""What each command runs: a playbook through the engine, a read-only report, the inventory, bench, tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from invoke import Exit

from dfp_cli.options import limit_of, parse_extra_vars
from engine.errors import UserError

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_INVENTORY = str(ROOT / "inventory.yaml")


def fail_user(exc: Exception | str) -> Exit:
    print(f"ERROR: {exc}", file=sys.stderr)
    return Exit(code=4)


def run_play(playbook: str, opts: dict, more_vars: dict | None = None) -> None:
    """Run a playbook with the shared options; exit with the run's code (0, 2, 3, 4)."""
    from engine.api import run_playbook

    try:
        result = run_playbook(
            playbook,
            opts["inventory"] or DEFAULT_INVENTORY,
            limit=limit_of(opts["host"], opts["group"], opts["limit"]),
            extra_vars={**(more_vars or {}), **parse_extra_vars(opts["extra_vars"])},
            check=opts["check"],
            diff=opts["diff"],
            tags=[t for t in (opts["tags"] or "").split(",") if t],
            skip_tags=[t for t in (opts["skip_tags"] or "").split(",") if t],
            forks=int(opts["forks"]),
            report=opts["report"],
            junit=opts["junit"],
            verbose=int(opts["verbose"] or 0),
            quiet=False,
            lock_wait=float(opts["lock_wait"]),
        )
    except UserError as exc:
        raise fail_user(exc) from None
    if result.error:
        raise fail_user(result.error)
    if result.exit_code:
        raise Exit(code=result.exit_code)


def playbook_command(playbook: str):
    def body(c, **opts):
        run_play(playbook, opts)

    return body


def play(c, playbook, **opts):
    run_play(playbook, opts)


def teardown(c, purge=False, **opts):
    run_play("teardown", opts, more_vars={"teardown_purge": bool(purge)})


def report_command(kind: str):
    """A read-only playbook run quietly; prints what its task registered as `report`, per host."""

    def body(c, host=None, group=None, inventory=None, extra_vars=None, json=False):  # noqa: A002 - the --json flag
        print_report(kind, host, group, inventory, extra_vars, json)

    return body


def print_report(kind: str, host, group, inventory, extra_vars, as_json: bool) -> None:
    from dfp_cli.summaries import render_summary
    from engine.api import run_playbook

    try:
        result = run_playbook(kind, inventory or DEFAULT_INVENTORY, limit=limit_of(host, group, None),
                              extra_vars=parse_extra_vars(extra_vars), quiet=True)
    except UserError as exc:
        raise fail_user(exc) from None
    if result.error:
        raise fail_user(result.error)
    out: dict[str, dict] = {}
    for r in result.results:
        if r.status == "unreachable" or (r.status == "failed" and r.host not in result.registered):
            out.setdefault(r.host, {"unreachable": r.status == "unreachable", "failed": r.status == "failed", "msg": r.msg})
    for h, registered in result.registered.items():
        report = registered.get("report")
        if isinstance(report, dict) and not report.get("skipped"):
            out[h] = report.get(kind, report)
    if as_json:
        print(json.dumps(out, indent=2, sort_keys=True, default=str))
    else:
        for h, data in out.items():
            print(render_summary(kind, h, data))
    if result.exit_code:
        raise Exit(code=result.exit_code)


def inventory(c, list=False, host=None, inventory=None):  # noqa: A002 - flag names mirror ansible-inventory
    """Print the inventory as JSON, like ansible-inventory."""
    from engine.inventory import Inventory

    try:
        inv = Inventory(inventory or DEFAULT_INVENTORY)
        data = inv.host_vars(host) if host else inv.as_list()
    except UserError as exc:
        raise fail_user(exc) from None
    print(json.dumps(data, indent=2, sort_keys=True, default=str))


def bench(c, quick=False):
    """Benchmarks against Ansible, pyinfra and raw Fabric; writes bench/results.json and docs/BENCHMARKS.md."""
    argv = [sys.executable, str(ROOT / "bench" / "run.py")] + (["--quick"] if quick else [])
    rc = subprocess.run(argv).returncode
    if rc:
        raise Exit(code=rc)


def test(c, k=None, fast=False):
    """Run the test suite (the same command CI runs)."""
    argv = [sys.executable, "-m", "pytest", "-q"]
    if fast:
        argv += ["-m", "not slow and not e2e"]
    if k:
        argv += ["-k", k]
    os.execv(sys.executable, argv)  # noqa: S606 - this python with a fixed pytest argv, no shell


def module_docs(c):
    """Write docs/MODULES.md from the modules' ARGS (the one place an argument is written)."""
    from dfp_cli.module_docs import DOC, write

    print(f"{DOC}: {'updated' if write() else 'up to date'}")
