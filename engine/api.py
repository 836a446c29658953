"""One call that runs a playbook: used by the CLI (tasks.py), the tests and the benchmarks."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from engine.connection import persist
from engine.connection.ssh_connect import open_connection, tcp_socket
from engine.errors import UserError
from engine.inventory.manager import Host, Inventory
from engine.parsing import vault
from engine.parsing.yamlfile import check_nesting, check_variable_names, load_yaml, parse_text, remember_written
from engine.playbook.modulespec import ENGINE_ACTIONS, LIBRARY, PROJECT_ROOT, module_args_spec, modules
from engine.playbook.plays import load_playbook, resolve_play_keywords
from engine.report.console import Console, json_report, load_sections, recap_of, write_json
from engine.report.origin import error_origin
from engine.run import fact_store
from engine.run.preflight import check_tags
from engine.run.results import TaskResult
from engine.run.runner import Runner
from engine.run.start_at import check_start_at_task
from engine.run.task_executor import ACCEPTED_PREFIX
from engine.template.markers import Unsafe
from engine.template.secrets import mask_vault_values

if TYPE_CHECKING:  # at run time through __getattr__ below, on first use
    from engine.report.junit import junit_case, junit_suite_element, xml_text

# The door of the engine for dfp_cli/ and bench/ (tests/engine/test_package_order.py keeps them to it): a run,
# its inspection, and what the commands need besides: the inventory (`invoke inventory`), the kept connections
# (`invoke disconnect`), reading -e values and files, the module tables (`invoke module-docs`), the rebuild's
# report; the benchmark's connection floor.
__all__ = [
    "ACCEPTED_PREFIX", "ENGINE_ACTIONS", "LIBRARY", "PROJECT_ROOT", "Host", "Inventory", "RunResult", "TaskResult",
    "Unsafe", "UserError", "check_nesting", "check_variable_names", "exit_code_for", "inspect_playbook", "junit_case",
    "junit_suite_element", "load_yaml", "mask_vault_values", "module_args_spec", "modules", "open_connection",
    "fact_store", "parse_text", "persist", "resolve_playbook", "run_playbook", "tcp_socket", "vault", "xml_text",
]

_JUNIT = ("junit_case", "junit_suite_element", "xml_text")  # engine/report/junit.py's, imported when first asked for


def __getattr__(name: str):
    """The JUnit names of __all__, imported on first use: ElementTree and junit's XML-character pattern cost
    every CLI run about 15 ms of its start, and only a run that writes a JUnit file needs them."""
    if name in _JUNIT:
        from engine.report import junit

        return getattr(junit, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_FAILED = 2
EXIT_UNREACHABLE = 3
EXIT_BAD_INPUT = 4
EXIT_REPORT = 5  # the run finished, but its --report / --junit file could not be written


@dataclass
class RunResult:
    exit_code: int
    recap: dict = field(default_factory=dict)
    results: list[TaskResult] = field(default_factory=list)
    elapsed_s: float = 0.0
    error: str = ""
    registered: dict = field(default_factory=dict)  # host -> {name: registered result}, secrets masked
    rolls: list = field(default_factory=list)  # serial plays: batches, hosts done/failed/untouched, stopped

    @property
    def tasks(self) -> list[dict]:
        return [r.as_report() for r in self.results]

    def find(self, task: str, host: str | None = None) -> list[TaskResult]:
        return [r for r in self.results if r.task == task and (host is None or r.host == host)]

    def total(self, status: str) -> int:
        return sum(c[status] for c in self.recap.values())


def resolve_playbook(name: str | Path) -> Path:
    """A path, or a name from playbooks/ (with or without .yaml)."""
    p = Path(name)
    if p.is_file():
        return p
    for cand in (
        PROJECT_ROOT / "playbooks" / f"{name}.yaml",
        PROJECT_ROOT / "playbooks" / f"{name}.yml",
        PROJECT_ROOT / "playbooks" / str(name),
    ):
        if cand.is_file():
            return cand
    raise UserError(f"playbook '{name}' not found (looked for {p} and playbooks/{name}.yaml)")


def exit_code_for(recap: dict, cleared: dict | None = None) -> int:
    """`cleared`: per host, the failures a `meta: clear_host_errors` forgot (they fail no run, as in Ansible)."""
    if any(c["failed"] > (cleared or {}).get(h, 0) for h, c in recap.items()):
        return EXIT_FAILED
    if any(c["unreachable"] for c in recap.values()):
        return EXIT_UNREACHABLE
    return EXIT_OK


def report_sections_of(plays: list) -> list[str]:
    """The report sections the plays ask for with the play variable `report_sections` (names the caller registers)."""
    names: list[str] = []
    for play in plays:
        value = play.vars.get("report_sections") or []
        if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            raise UserError(f"{play.source}: play '{play.name}': report_sections must be a list of section names")
        names += [v for v in value if v not in names]
    return names


def run_playbook(
    playbook: str | Path,
    inventory: str | Path | list | dict = PROJECT_ROOT / "inventory.yaml",
    *,
    limit: str | None = None,
    extra_vars: dict | None = None,
    check: bool = False,
    diff: bool = False,
    tags: set[str] | list[str] | None = None,
    skip_tags: set[str] | list[str] | None = None,
    forks: int = 8,
    report: str | None = None,
    junit: str | None = None,
    verbose: int = 0,
    quiet: bool = True,
    console: Console | None = None,
    raise_user_errors: bool = False,
    lock_wait: float = 60.0,
    report_sections: dict | None = None,
    host_defaults: dict | None = None,
    start_at_task: str | None = None,
    force_handlers: bool = False,
) -> RunResult:
    """Run a playbook. `host_defaults`: variables every host has unless its inventory sets them (the CLI's -u,
    --private-key, -b, --become-user, -K); `start_at_task`: skip the tasks before the first of that name."""
    started = time.monotonic()
    try:
        if console is None:
            console = Console(verbose=verbose, show_diff=diff, quiet=quiet)
        settings = dict(check=check, diff=diff, forks=forks, console=console, lock_wait=lock_wait,
                        start_at_task=start_at_task, force_handlers=force_handlers)
        path, plays, runner, hosts = _plan(playbook, inventory, extra_vars, limit, tags, skip_tags, settings,
                                           host_defaults)
        sections = load_sections(report_sections_of(plays), report_sections, bool(report or junit))
        check_output_path(report, "--report")
        check_output_path(junit, "--junit")
        console.playbook_start(str(playbook), len(plays))
        results = runner.run(plays)
    except UserError as exc:
        if raise_user_errors:
            raise
        return RunResult(EXIT_BAD_INPUT, error=str(exc) + error_origin(exc), elapsed_s=time.monotonic() - started)
    hosts += [h for h in runner.inventory.added if h not in hosts]  # add_host's hosts, from the play that added them
    recap = recap_of(results, hosts)
    elapsed = time.monotonic() - started
    console.recap(recap, elapsed)
    code = exit_code_for(recap, runner.failures_cleared)
    meta = {"playbook": str(path), "check": check, "exit_code": code, "elapsed_s": round(elapsed, 3)}
    if runner.rolls:
        meta["rolling"] = runner.rolls
    secrets = runner.variables.secrets
    try:
        if report:
            write_json(report, json_report(results, recap, meta, sections, secrets))
        if junit:
            from engine.report.junit import write_junit

            write_junit(junit, results, path.stem, sections)
    except OSError as exc:
        error = (f"writing the {'JSON report' if report and exc.filename in (None, report) else 'report'} failed: "
                 f"{exc.strerror or exc} ({exc.filename or report or junit}); the run itself ended with exit {code} "
                 f"(its recap is above). Free space there or choose another path.")
        return RunResult(EXIT_REPORT, recap, results, elapsed, error=error, rolls=runner.rolls)
    registered = {h: secrets.redact_obj(st.registered) for h, st in runner.states.items()}
    return RunResult(code, recap, results, elapsed, registered=registered, rolls=runner.rolls)


def _plan(playbook, inventory, extra_vars: dict | None, limit: str | None, tags, skip_tags, settings: dict,
          host_defaults: dict | None = None) -> tuple:
    """(playbook path, plays, Runner, the hosts the run will touch): what a run and a listing both start from;
    a UserError for anything wrong in them."""
    check_variable_names(extra_vars or {}, "extra variables (-e)")
    remember_written([extra_vars, inventory])  # what the caller wrote (-e, an inventory given as data) is trusted
    inv = Inventory(data=inventory) if isinstance(inventory, dict) else Inventory(inventory)
    inv.set_defaults(host_defaults or {})
    path = resolve_playbook(playbook)
    plays = load_playbook(path, extra_vars=extra_vars)  # a templated import's name reads -e
    runner = Runner(inv, extra_vars=extra_vars, tags=set(tags or ()), skip_tags=set(skip_tags or ()), limit=limit,
                    **settings)
    inv.grows = any(t.module in ("add_host", "group_by") for p in plays for t in p.all_tasks())  # new names later
    resolve_play_keywords(plays, runner.templar, runner.extra_vars)  # `strategy: "{{ s }}"`, before any use
    runner.resolve_tags(plays)  # templated tags, before anything selects by them
    check_tags(plays, runner.tags, runner.skip_tags, runner.task_selected)
    check_start_at_task(plays, settings.get("start_at_task"))
    hosts: list[str] = []
    for play in plays:
        hosts.extend(h for h in runner.hosts_for(play) if h not in hosts)
    if limit and not hosts:
        raise UserError(f"--limit/--host/--group '{limit}' selects no host of the playbook's plays")
    return path, plays, runner, hosts


def inspect_playbook(
    playbook: str | Path,
    inventory: str | Path | list | dict = PROJECT_ROOT / "inventory.yaml",
    *,
    listings: set[str] | frozenset[str] = frozenset(),
    syntax_check: bool = False,
    limit: str | None = None,
    extra_vars: dict | None = None,
    tags: set[str] | list[str] | None = None,
    skip_tags: set[str] | list[str] | None = None,
) -> tuple[int, str]:
    """ansible-playbook's --list-hosts/--list-tasks/--list-tags (`listings`: hosts, tasks, tags) and
    --syntax-check: (exit code, what to print). No host is contacted. The syntax check runs every check a run
    makes before it touches a host (modules, arguments, types, undefined variables, ssh settings)."""
    from engine.playbook.listing import listing

    try:
        _path, plays, runner, _hosts = _plan(playbook, inventory, extra_vars, limit, tags, skip_tags,
                                             dict(console=Console(quiet=True)))
        if syntax_check:
            runner.preflight(plays)
        if listings:
            everything = "tags" in listings and not (runner.tags or runner.skip_tags)  # Ansible: --tags never,all
            selected = runner.listing_selected if everything else runner.task_selected
            return EXIT_OK, listing(playbook, plays, runner.hosts_for, selected, set(listings))
        return EXIT_OK, f"\nplaybook: {playbook}\n"
    except UserError as exc:
        return EXIT_BAD_INPUT, str(exc)


def check_output_path(path: str | None, flag: str) -> None:
    """A report path the run can write, checked before any host is touched."""
    if not path:
        return
    target = Path(path).expanduser()
    folder = target.parent if str(target.parent) else Path(".")
    if target.is_dir():
        raise UserError(f"{flag} {path} is a folder; give a file name in it (e.g. {target / 'report'}). Nothing was run.")
    if target.exists() and not target.is_file():  # a device or a socket: never renamed over
        raise UserError(f"{flag} {path} is not a regular file; give a file name. Nothing was run.")
    if not folder.is_dir():
        raise UserError(f"{flag} {path}: the folder {folder} does not exist; create it or choose another path. "
                        "Nothing was run.")
    if not os.access(folder, os.W_OK) or (target.exists() and not os.access(target, os.W_OK)):
        raise UserError(f"{flag} {path}: {folder} is not writable by this user; choose another path. Nothing was run.")
