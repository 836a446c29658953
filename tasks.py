"""Invoke entry points: `invoke provision --host gpu1`, restart-server, teardown, rebuild, status, ...

Thin typed tasks: each turns its flags into one engine call. The engine is imported inside the tasks
so `invoke --list` and a no-change run start fast.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from invoke import Exit, task

ROOT = Path(__file__).resolve().parent
DEFAULT_INVENTORY = str(ROOT / "inventory.yaml")

COMMON_HELP = {
    "host": "run on this host only (a name from the inventory)",
    "group": "run on the hosts of this group only",
    "limit": "Ansible-style host pattern (e.g. 'gpu*:!gpu3')",
    "check": "report what would change, change nothing",
    "diff": "show before/after of what changes",
    "extra_vars": "KEY=VALUE (repeatable); JSON values allowed; @FILE.yaml loads a file",
    "tags": "only tasks with these tags (comma-separated)",
    "skip_tags": "skip tasks with these tags (comma-separated)",
    "forks": "hosts in parallel (default 8)",
    "report": "write a JSON report to this file",
    "junit": "write a JUnit XML report to this file",
    "inventory": "inventory file (default: inventory.yaml)",
    "lock_wait": "seconds to wait for another run's host lock before failing that host (default 60)",
    "verbose": "more output (-v: messages of ok tasks and progress, -vv: tracebacks of module crashes)",
}


def _parse_extra_vars(items: list[str]) -> dict:
    """-e KEY=VALUE (JSON values) and -e @file.yaml, in order. Errors name the -e by position, never its
    text: a mistyped -e may be a secret (a token pasted without its KEY=)."""
    from engine.errors import UserError
    from engine.yamlfile import check_nesting, check_variable_names, load_yaml

    out: dict = {}
    for number, item in enumerate(items or [], start=1):
        where = f"-e number {number}"
        if item.startswith("@"):
            data = load_yaml(item[1:], "extra vars file")
            if not isinstance(data, dict):
                raise UserError(f"{item[1:]}: an extra vars file must be a mapping of variable names to values")
            check_variable_names(data, item[1:])
            out.update(data)
            continue
        if "=" not in item:
            raise UserError(
                f"{where}: extra variables are KEY=VALUE (or @file.yaml), and this one has no '='; e.g. -e vllm_port=8001 "
                "(its text is not shown: it may be a secret)"
            )
        key, _, raw = item.partition("=")
        key = key.strip()
        if not key.isidentifier():
            raise UserError(
                f"{where}: the text before '=' is not a valid variable name (letters, digits and _, not starting with "
                "a digit); e.g. -e vllm_port=8001 (its text is not shown: it may be a secret)"
            )
        try:
            value = json.loads(raw)
        except ValueError:
            value = raw
        except RecursionError:  # nested far deeper than check_nesting allows
            raise UserError(f"{where} ({key}): the JSON value nests lists/mappings too deep; flatten it") from None
        check_nesting(value, f"{where} ({key})")
        out[key] = value
    return out


def _limit(host: str | None, group: str | None, limit: str | None) -> str | None:
    parts = [p for p in (host, group, limit) if p]
    if len(parts) > 1:
        # --host a --group g means "a, if it is in g" (intersection), like Ansible's '&'.
        return ",".join([parts[0]] + [f"&{p}" for p in parts[1:]])
    return parts[0] if parts else None


def _fail_user(exc: Exception) -> Exit:
    print(f"ERROR: {exc}", file=sys.stderr)
    return Exit(code=4)


def _play(
    playbook: str,
    host=None,
    group=None,
    limit=None,
    check=False,
    diff=False,
    extra_vars=None,
    tags=None,
    skip_tags=None,
    forks=8,
    report=None,
    junit=None,
    inventory=None,
    verbose=0,
    more_vars=None,
    lock_wait=60,
) -> None:
    from engine.api import run_playbook
    from engine.errors import UserError

    try:
        evars = dict(more_vars or {})
        evars.update(_parse_extra_vars(extra_vars or []))
        result = run_playbook(
            playbook,
            inventory or DEFAULT_INVENTORY,
            limit=_limit(host, group, limit),
            extra_vars=evars,
            check=check,
            diff=diff,
            tags=[t for t in (tags or "").split(",") if t],
            skip_tags=[t for t in (skip_tags or "").split(",") if t],
            forks=int(forks),
            report=report,
            junit=junit,
            verbose=int(verbose or 0),
            quiet=False,
            lock_wait=float(lock_wait),
        )
    except UserError as exc:
        raise _fail_user(exc) from None
    if result.error:
        raise _fail_user(result.error)
    if result.exit_code:
        raise Exit(code=result.exit_code)


_COMMON = dict(help=COMMON_HELP, iterable=["extra_vars"], incrementable=["verbose"])


@task(**_COMMON)
def play(
    c,
    playbook,
    host=None,
    group=None,
    limit=None,
    check=False,
    diff=False,
    extra_vars=None,
    tags=None,
    skip_tags=None,
    forks=8,
    report=None,
    junit=None,
    inventory=None,
    verbose=0,
    lock_wait=60,
):
    """Run any playbook (a path, or a name in playbooks/)."""
    _play(playbook, host, group, limit, check, diff, extra_vars, tags, skip_tags, forks, report, junit, inventory, verbose,
          lock_wait=lock_wait)


def _playbook_task(playbook: str, doc: str):
    """An Invoke task that runs playbooks/PLAYBOOK.yaml with the common options (one signature for all)."""

    def run(c, host=None, group=None, limit=None, check=False, diff=False, extra_vars=None, tags=None,
            skip_tags=None, forks=8, report=None, junit=None, inventory=None, verbose=0, lock_wait=60):
        _play(playbook, host, group, limit, check, diff, extra_vars, tags, skip_tags, forks, report, junit, inventory, verbose,
              lock_wait=lock_wait)

    run.__name__ = run.__qualname__ = playbook.replace("-", "_")
    run.__doc__ = doc
    return task(**_COMMON)(run)


provision = _playbook_task("provision", "Bring hosts to a healthy vLLM + DFlash server, verified down to the acceptance rate.")
restart_server = _playbook_task("restart-server", "Stop the server (whole process tree), free the GPU, start it again and verify it.")
rebuild = _playbook_task("rebuild", "Nightly: fresh environment beside the current one, restart and verify the server on it, then switch; roll back on failure.")


@task(
    help=dict(COMMON_HELP, purge="also remove environments and generated configs (logs are kept)"),
    iterable=["extra_vars"],
    incrementable=["verbose"],
)
def teardown(c, host=None, group=None, limit=None, check=False, diff=False, extra_vars=None, tags=None,
             skip_tags=None, forks=8, report=None, junit=None, inventory=None, verbose=0, purge=False, lock_wait=60):
    """Stop the server and free the GPU; --purge also removes environments and generated configs."""
    _play("teardown", host, group, limit, check, diff, extra_vars, tags, skip_tags, forks, report, junit, inventory,
          verbose, more_vars={"teardown_purge": bool(purge)}, lock_wait=lock_wait)


@task(
    help={
        "list": "all hosts and groups (like ansible-inventory --list)",
        "host": "one host's merged variables",
        "inventory": COMMON_HELP["inventory"],
    },
    name="inventory",
)
def inventory_(c, list=False, host=None, inventory=None):  # noqa: A002 - flag name mirrors ansible-inventory
    """Print the inventory as JSON, like ansible-inventory."""
    from engine.errors import UserError
    from engine.inventory import Inventory

    try:
        inv = Inventory(inventory or DEFAULT_INVENTORY)
        data = inv.host_vars(host) if host else inv.as_list()
    except UserError as exc:
        raise _fail_user(exc) from None
    print(json.dumps(data, indent=2, sort_keys=True, default=str))


_REPORT_TASK = dict(
    help={k: COMMON_HELP[k] for k in ("host", "group", "inventory", "extra_vars")} | {"json": "print JSON"},
    iterable=["extra_vars"],
)


@task(**_REPORT_TASK)
def facts(c, host=None, group=None, json=False, inventory=None, extra_vars=None):  # noqa: A002
    """Gather and print facts (OS, python, CPUs, memory, disk, systemd, GPUs)."""
    _report_play("facts", host, group, json, inventory, extra_vars)


@task(**_REPORT_TASK)
def status(c, host=None, group=None, json=False, inventory=None, extra_vars=None):  # noqa: A002
    """Is the server running and healthy, what it serves, its acceptance rate and GPU memory."""
    _report_play("status", host, group, json, inventory, extra_vars)


def _report_play(kind: str, host, group, as_json: bool, inventory, extra_vars) -> None:
    """Run a read-only playbook quietly and print what its `report` task registered, per host."""
    import json as _json

    from engine.api import run_playbook
    from engine.errors import UserError

    try:
        result = run_playbook(
            kind,
            inventory or DEFAULT_INVENTORY,
            limit=_limit(host, group, None),
            extra_vars=_parse_extra_vars(extra_vars or []),
            quiet=True,
        )
    except UserError as exc:
        raise _fail_user(exc) from None
    if result.error:
        raise _fail_user(result.error)
    out = {}
    for r in result.results:
        if r.status == "unreachable":
            out[r.host] = {"unreachable": True, "msg": r.msg}
        elif r.task.startswith("Report") and r.status != "skipped":
            out[r.host] = r.result.get(kind, r.result)
        elif r.status == "failed" and r.host not in out:
            out[r.host] = {"failed": True, "msg": r.msg}
    if as_json:
        print(_json.dumps(out, indent=2, sort_keys=True, default=str))
    else:
        from engine.summaries import render_summary

        for h, data in out.items():
            print(render_summary(kind, h, data))
    if result.exit_code:
        raise Exit(code=result.exit_code)


@task(help={"quick": "a short run (under 2 minutes): fewer repetitions, no cold provision"})
def bench(c, quick=False):
    """Benchmarks against Ansible, pyinfra and raw Fabric; writes bench/results.json and docs/BENCHMARKS.md."""
    import subprocess

    argv = [sys.executable, str(ROOT / "bench" / "run.py")] + (["--quick"] if quick else [])
    rc = subprocess.run(argv).returncode
    if rc:
        raise Exit(code=rc)


@task(help={"k": "only tests matching this expression", "fast": "skip slow and end-to-end tests"})
def test(c, k=None, fast=False):
    """Run the test suite (the same command CI runs)."""
    argv = [sys.executable, "-m", "pytest", "-q"]
    if fast:
        argv += ["-m", "not slow and not e2e"]
    if k:
        argv += ["-k", k]
    os.execv(sys.executable, argv)  # noqa: S606 - this python with a fixed pytest argv, no shell
