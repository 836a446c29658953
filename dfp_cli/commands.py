"""What each command runs: a playbook through the engine, a read-only report, the inventory, bench, tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from invoke import Exit

from dfp_cli.options import (
    LISTING_OPTIONS,
    host_defaults_of,
    inventories_of,
    limit_of,
    parse_extra_vars,
    split_tags,
    use_vault_password_file,
    verbosity_of,
)
from engine.errors import UserError

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_INVENTORY = str(ROOT / "inventory.yaml")


def fail_user(exc: Exception | str) -> Exit:
    print(f"[ERROR]: {exc}", file=sys.stderr)
    return Exit(code=4)


def selection(opts: dict, more_vars: dict | None) -> dict:
    """What a run and a listing both take from the shared options: the hosts, the tags and the variables (the
    vault password file set first, for -e @file.yaml may be encrypted)."""
    use_vault_password_file(opts["vault_password_file"])
    return dict(limit=limit_of(opts["host"], opts["group"], opts["limit"]), tags=split_tags(opts["tags"]),
                skip_tags=split_tags(opts["skip_tags"]),
                extra_vars={**(more_vars or {}), **parse_extra_vars(opts["extra_vars"])})


def inspect_play(playbook: str, opts: dict, more_vars: dict | None = None) -> None:
    """--syntax-check / --list-hosts / --list-tasks / --list-tags: print what ansible-playbook would, touch no host."""
    try:
        chosen = selection(opts, more_vars)
        from engine.api import inspect_playbook

        code, text = inspect_playbook(
            playbook, inventories_of(opts["inventory"], DEFAULT_INVENTORY), syntax_check=bool(opts["syntax_check"]),
            listings={what for flag, what in LISTING_OPTIONS.items() if opts[flag]}, **chosen)
    except UserError as exc:
        raise fail_user(exc) from None
    if code:
        raise fail_user(text)
    print(text, end="")


def run_play(playbook: str, opts: dict, more_vars: dict | None = None) -> None:
    """Run a playbook with the shared options; exit with the run's code (0, 2, 3, 4). After a playbook that
    starts the server, each host's last line says where it listens and how to talk to it."""
    if opts.get("syntax_check") or any(opts.get(flag) for flag in LISTING_OPTIONS):
        inspect_play(playbook, opts, more_vars)
        return
    try:
        if opts.get("flush_cache"):
            from engine.api import fact_store

            fact_store.flush()
        settings = dict(
            check=opts["check"],
            diff=opts["diff"],
            forks=int(opts["forks"]),
            report=opts["report"],
            junit=opts["junit"],
            verbose=verbosity_of(opts["verbose"]),
            quiet=False,
            lock_wait=float(opts["lock_wait"]),
            start_at_task=opts.get("start_at_task") or None,
            force_handlers=bool(opts.get("force_handlers")),
            **selection(opts, more_vars),
        )
        settings["host_defaults"] = host_defaults_of(opts)  # -K asks only once the options are known good
        from dfp_cli import rebuild_report
        from engine.api import run_playbook  # here, not at the top: `invoke --list` and --help stay fast

        result = run_playbook(playbook, inventories_of(opts["inventory"], DEFAULT_INVENTORY),
                              report_sections={rebuild_report.NAME: rebuild_report}, **settings)
    except UserError as exc:
        raise fail_user(exc) from None
    if result.error:
        print(f"[ERROR]: {result.error}", file=sys.stderr)
        raise Exit(code=result.exit_code or 4)
    if playbook in SERVING_PLAYBOOKS:
        print_endpoints(result)
    if result.exit_code:
        raise Exit(code=result.exit_code)


SERVING_PLAYBOOKS = ("provision", "restart-server", "rebuild")  # their vllm-service role registers `vllm_server`


def print_endpoints(result) -> None:
    """One line per host whose server runs after the play: the address, the served model and a curl to try."""
    from dfp_cli.summaries import endpoint_text

    for host, registered in result.registered.items():
        server = registered.get("vllm_server")
        if isinstance(server, dict) and isinstance(server.get("endpoint"), dict) and not server.get("failed"):
            print(f"{host}: {endpoint_text(host, server['endpoint'])}")


def playbook_command(playbook: str):
    def body(c, **opts):
        run_play(playbook, opts)

    return body


def play(c, playbook, **opts):
    run_play(playbook, opts)


def teardown(c, purge=False, purge_models=False, **opts):
    run_play("teardown", opts, more_vars={"teardown_purge": bool(purge), "teardown_purge_models": bool(purge_models)})


def report_command(kind: str):
    """A read-only playbook run quietly; prints what its task registered as `report`, per host."""

    def body(c, **opts):
        print_report(kind, opts)

    return body


def _reports(kind: str, result) -> dict[str, dict]:
    """{host: what its `report` registered}, or {unreachable/failed, msg} for a host that could not say."""
    out: dict[str, dict] = {}
    for r in result.results:
        if r.status == "unreachable" or (r.status == "failed" and r.host not in result.registered):
            out.setdefault(r.host, {"unreachable": r.status == "unreachable", "failed": r.status == "failed", "msg": r.msg})
    for h, registered in result.registered.items():
        report = registered.get("report")
        if isinstance(report, dict) and not report.get("skipped"):
            out[h] = report.get(kind, report)
    return out


# `invoke status` exits as `systemctl status` does (LSB status codes), the worst host deciding.
STATUS_RUNNING = 0  # running, and /health answers 200
STATUS_NOT_RUNNING = 3  # not running, or running without a healthy /health (starting, hung)
STATUS_UNKNOWN = 4  # never provisioned there (no launch files, no teardown record: "no such unit"), unreachable, failed


def status_exit_code(reports: dict[str, dict]) -> int:
    codes = [STATUS_UNKNOWN]  # no host reported: nothing is known
    if reports:
        codes = [_host_status_code(data) for data in reports.values()]
    return max(codes)


def _host_status_code(data: dict) -> int:
    if not isinstance(data, dict) or data.get("unreachable") or data.get("failed"):
        return STATUS_UNKNOWN
    if not data.get("provisioned"):  # vllm_status: False with neither a launch nor teardown's record there
        return STATUS_UNKNOWN
    if data.get("running") and data.get("health") == "ok":
        return STATUS_RUNNING
    return STATUS_NOT_RUNNING


def print_report(kind: str, opts: dict) -> None:
    from dfp_cli.summaries import render_summary

    fleet = kind == "status" and bool(opts["group"] or opts["limit"])  # one line per host (dfp_cli/monitoring/fleet)
    try:
        use_vault_password_file(opts["vault_password_file"])
        extra_vars = parse_extra_vars(opts["extra_vars"])
        from engine.api import run_playbook

        inventories = inventories_of(opts["inventory"], DEFAULT_INVENTORY)
        result = run_playbook("monitoring" if fleet else kind, inventories, extra_vars=extra_vars,
                              limit=limit_of(opts["host"], opts["group"], opts["limit"]), quiet=True,
                              host_defaults=host_defaults_of(opts))
        if fleet and not result.error:
            print_fleet(result, opts, inventories, extra_vars)
            return
    except UserError as exc:
        raise fail_user(exc) from None
    if result.error:
        raise fail_user(result.error)
    out = _reports(kind, result)
    if opts["json"]:
        print(json.dumps(out, indent=2, sort_keys=True, default=str))
    else:
        for h, data in out.items():
            print(render_summary(kind, h, data))
    code = status_exit_code(out) if kind == "status" else result.exit_code
    if code:
        raise Exit(code=code)


def print_fleet(result, opts: dict, inventories: list, extra_vars: dict) -> None:
    """`invoke status --group G` / -l: one line per host (or --json: a list), exit code as for status."""
    from dfp_cli.monitoring.fleet import fleet_rows, line_of, prometheus_url_of

    out = _reports("status", result)
    rows = fleet_rows(result, out, opts["group"], prometheus_url_of(inventories, sorted(out), extra_vars))
    print(json.dumps(rows, indent=2, sort_keys=True, default=str) if opts["json"] else "\n".join(map(line_of, rows)))
    code = status_exit_code(out)
    if code:
        raise Exit(code=code)


def inventory(c, **opts):
    """Print the inventory as JSON, like ansible-inventory."""
    try:
        use_vault_password_file(opts["vault_password_file"])
        from engine.api import Inventory, mask_vault_values

        inv = Inventory(inventories_of(opts["inventory"], DEFAULT_INVENTORY))
        data = mask_vault_values(inv.host_vars(opts["host"])) if opts["host"] else inv.as_list()  # as --list does
    except UserError as exc:
        raise fail_user(exc) from None
    print(json.dumps(data, indent=2, sort_keys=True, default=str))


def disconnect(c):
    """Close the connections kept for later runs (ControlPersist: 60 s after each run by default), as `ssh -O exit`.
    A daemon that does not answer within its deadline is named, and the command ends with exit 3."""
    from engine.api import persist
    from engine.errors import UserError

    try:
        stopped, silent = persist.stop_all()
    except UserError as exc:
        raise fail_user(exc) from None
    if stopped or not silent:
        print("kept connections: closed" if stopped else "kept connections: none")
    for line in silent:
        print(f"kept connections: {line}")
    if silent:
        raise Exit(code=3)


def bench(c, quick=False):
    """Benchmarks against Ansible, pyinfra and raw Fabric; writes bench/results.json and docs/BENCHMARKS.md."""
    argv = [sys.executable, str(ROOT / "bench" / "run.py")] + (["--quick"] if quick else [])
    rc = subprocess.run(argv).returncode
    if rc:
        raise Exit(code=rc)


def test(c, k=None, fast=False):
    """Run the test suite (the same command CI runs)."""
    argv = [sys.executable, "-m", "pytest", "-q", "--durations=15"]  # the slowest, for keeping the suite short
    if fast:
        argv += ["-m", "not slow and not e2e"]
    if k:
        argv += ["-k", k]
    os.execv(sys.executable, argv)  # noqa: S606 - this python with a fixed pytest argv, no shell


LOCK_ARGV = ["pip", "compile", "--universal", "--python-version", "3.10", "--upgrade", "--quiet",
             "requirements.txt", "requirements-test.txt", "-o", "constraints.txt"]
# The tests' stand-in Hub (olah) lives in a venv of its own, pinned apart (tests/fakes/hub.py).
OLAH_LOCK_ARGV = [*LOCK_ARGV[:7], "tests/fakes/olah-requirements.txt", "-o", "tests/fakes/olah-constraints.txt"]


def lock(c):
    """Refresh constraints.txt (the pinned control-node packages) from requirements*.txt with uv."""
    import shutil

    uv = shutil.which("uv") or shutil.which("uv", path=os.path.dirname(sys.executable))
    if not uv:
        raise Exit("uv is not installed: `pip install uv`, then `invoke lock` again", code=4)
    for argv in (LOCK_ARGV, OLAH_LOCK_ARGV):
        rc = subprocess.run([uv, *argv], cwd=ROOT).returncode
        if rc:
            raise Exit(code=rc)
    print("constraints.txt: refreshed; run `invoke test` in a fresh venv before committing it")


def module_docs(c):
    """Write docs/MODULES.md from the modules' ARGS (the one place an argument is written)."""
    from dfp_cli.module_docs import DOC, write

    print(f"{DOC}: {'updated' if write() else 'up to date'}")
