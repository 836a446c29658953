"""Reporting: the console a person follows, and the JSON report a job keeps (the JUnit XML one: engine/report/junit.py)."""

from __future__ import annotations

import json
import re
import shutil
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any, TextIO

from engine.cache import write_atomically
from engine.errors import UserError
from engine.run.results import STATUSES, TaskResult

_COLORS = {"ok": "32", "changed": "33", "failed": "31", "unreachable": "31;1", "skipped": "36", "warn": "35"}


# Terminal control characters a host's text may carry (ESC sequences move the cursor, clear a line, set the
# window title; \r returns to the line's start): shown escaped, so host output cannot forge the console's lines.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str, indent: str = "    ") -> str:
    """Text from a host as the console shows it: control characters escaped (\x1b), and each of its own lines
    indented (with `indent`) so that none starts like a status line such as `ok: [h1]`."""
    text = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", str(text))
    return text.replace("\n", "\n" + indent) if indent else text


class Console:
    """PLAY/TASK banners, one line per host result, a RECAP, and a live line for long tasks."""

    LIVE_AFTER_S = 3.0

    def __init__(self, stream: TextIO | None = None, verbose: int = 0, show_diff: bool = False, quiet: bool = False) -> None:
        self.out = stream or sys.stdout
        self.verbose = verbose
        self.show_diff = show_diff
        self.quiet = quiet
        self.tty = hasattr(self.out, "isatty") and self.out.isatty()
        self._lock = threading.Lock()
        self._task: str | None = None
        self._started = 0.0
        self._pending: set[str] = set()
        self._last_progress: dict[str, str] = {}
        self._live_shown = False
        self._next_plain = 0.0
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    def _color(self, text: str, status: str) -> str:
        if not self.tty or status not in _COLORS:
            return text
        return f"\033[{_COLORS[status]}m{text}\033[0m"

    def _write(self, line: str) -> None:
        if self.quiet:
            return
        with self._lock:
            if self._live_shown:
                self.out.write("\r\033[K")
                self._live_shown = False
            self.out.write(line + "\n")
            self.out.flush()

    def _banner(self, title: str) -> None:
        width = min(shutil.get_terminal_size((100, 20)).columns, 100)
        self._write("")
        self._write(title + " " + "*" * max(3, width - len(title) - 1))

    def play_start(self, play, hosts: list[str]) -> None:
        self._banner(f"PLAY [{play.name}]")
        if not hosts:
            self._write("skipping: no hosts matched")

    def task_start(self, name: str, role: str | None, hosts: list[str], handler: bool = False) -> None:
        kind = "RUNNING HANDLER" if handler else "TASK"
        self._banner(f"{kind} [{role + ' : ' if role else ''}{name}]")
        with self._lock:
            self._task = name
            self._started = time.monotonic()
            self._next_plain = self._started + 10
            self._pending = set(hosts)
            self._last_progress = {}
        if self._ticker is None and not self.quiet:
            self._ticker = threading.Thread(target=self._tick, daemon=True)
            self._ticker.start()

    def task_done(self) -> None:
        with self._lock:
            self._pending = set()
            if self._live_shown:
                self.out.write("\r\033[K")
                self.out.flush()
                self._live_shown = False

    def progress(self, host: str, msg: str) -> None:
        msg = printable(msg)
        with self._lock:
            self._last_progress[host] = msg
        if self.verbose:
            self._write(f"  [{host}] {msg}")

    def _tick(self) -> None:
        while not self._stop.wait(0.5):
            with self._lock:
                if not self._pending:
                    continue
                now = time.monotonic()
                elapsed = now - self._started
                if elapsed < self.LIVE_AFTER_S:
                    continue
                line = live_line(elapsed, sorted(self._pending), self._last_progress, self._task or "")
                if self.tty:
                    cols = shutil.get_terminal_size((100, 20)).columns
                    self.out.write("\r\033[K" + line[: cols - 1])
                    self.out.flush()
                    self._live_shown = True
                elif now >= self._next_plain:
                    self.out.write(line + "\n")
                    self.out.flush()
                    self._next_plain = now + 10

    def host_result(self, res: TaskResult) -> None:
        with self._lock:
            self._pending.discard(res.host)
        label = {"ok": "ok", "changed": "changed", "failed": "failed", "skipped": "skipping", "unreachable": "unreachable"}[
            res.status
        ]
        if res.ignored:
            label = "failed (ignored)"
        line = f"{label}: [{res.host}{f' -> {res.delegated_to}' if res.delegated_to else ''}]"
        show_msg = res.status in ("failed", "unreachable", "changed") or self.verbose or res.module in ("debug", "assert")
        msg = printable(res.msg)
        if msg and show_msg and res.status != "skipped":
            line += f" {msg}" if res.status not in ("failed", "unreachable") else f"\n    {msg}"
        elif res.status == "skipped" and self.verbose and msg:
            line += f" {msg}"
        if res.duration_s >= 1.0:
            line += f" ({res.duration_s:.1f}s)"
        self._write(self._color(line, res.status))
        for w in res.result.get("warnings", []) or []:
            self._write(self._color(f"  [WARNING] [{res.host}] {printable(str(w))}", "warn"))
        if self.show_diff or res.diff:  # -D, or the task's `diff: true` (as ansible-playbook shows it)
            for diff in changed_diffs(res.result):
                self._write(printable(format_diff(diff), indent=""))
        if self.verbose >= 2 and res.result.get("exception"):
            self._write(printable(str(res.result["exception"]), indent=""))

    def recap(self, stats: dict[str, dict], elapsed: float) -> None:
        self._stop.set()
        self._banner("PLAY RECAP")
        width = max((len(h) for h in stats), default=4)
        for host, counts in stats.items():
            status = (
                "failed"
                if counts["failed"]
                else "unreachable"
                if counts["unreachable"]
                else "changed"
                if counts["changed"]
                else "ok"
            )
            line = f"{host:<{width}} : " + "  ".join(f"{s}={counts[s]}" for s in STATUSES)
            self._write(self._color(line, status))
        self._write(f"\n{elapsed:.2f}s")


def live_line(elapsed: float, waiting: list[str], notes: dict[str, str], task: str) -> str:
    """The line a long task shows while it runs: what changes (the seconds, the hosts, the task's last note)
    first and the task's name last, so that a terminal narrower than the line cuts the name (shown in the
    TASK banner above it) and never the seconds or the note, which are what says that the task is not frozen."""
    hosts = ", ".join(waiting[:4]) + (f" +{len(waiting) - 4}" if len(waiting) > 4 else "")
    note = f": {notes[waiting[0]]}" if len(waiting) == 1 and waiting[0] in notes else ""
    return f"  ... {elapsed:.0f}s on {hosts}{note} | still running: {task}"


def changed_diffs(result: dict) -> list[dict]:
    """The diffs a result shows: its own when it changed, else each changed loop item's."""
    items = result.get("results")
    if isinstance(items, list):
        return [d for r in items if isinstance(r, dict) and r.get("changed") for d in changed_diffs(r)]
    diff = result.get("diff")
    return [diff] if result.get("changed") and isinstance(diff, dict) else []


def format_diff(diff: dict) -> str:
    import difflib

    before, after = diff.get("before"), diff.get("after")
    if isinstance(before, str) and isinstance(after, str):
        lines = difflib.unified_diff(before.splitlines(), after.splitlines(), "before", "after", lineterm="")
        return "\n".join("    " + line for line in lines)
    return f"    before: {json.dumps(before, default=str)}\n    after:  {json.dumps(after, default=str)}"


def recap_of(results: list[TaskResult], hosts: list[str]) -> dict[str, dict]:
    """Per host counts as Ansible's PLAY RECAP: ok counts every task that succeeded, changed ones included
    (ok=5 changed=2 is five successes, two of which changed something); an ignored failure counts as ok and
    ignored; meta tasks are not counted. Only the plays' hosts: a delegate outside
    them (its start's own records) is counted in the task of the host that delegated to it."""
    stats = {h: {s: 0 for s in STATUSES} for h in hosts}
    for r in results:
        counts = stats.get(r.host)
        if counts is None or r.module == "meta":  # Ansible counts no meta task (noop, flush_handlers, end_*)
            continue
        if r.ignored:  # an ignored failure is also ok (and changed, when it changed), as Ansible counts it
            counts["ignored"] += 1
            counts["ok"] += 1
            counts["changed"] += r.changed
            continue
        key = "rescued" if r.rescued else r.status
        counts[key] += 1
        if key == "changed":
            counts["ok"] += 1
    return stats


def by_host(results: list[TaskResult]) -> dict[str, list[TaskResult]]:
    out: dict[str, list[TaskResult]] = {}
    for r in results:
        out.setdefault(r.host, []).append(r)
    return out


def load_sections(names: list[str], registry: dict | None, needed: bool) -> list[Any]:
    """The report sections a playbook asks for (play var `report_sections`: names), from the caller's registry.

    A section module has NAME, `section(results_of_one_host) -> dict | None` and `junit_suite(host, section)
    -> xml.etree.ElementTree.Element` (a <testsuite> with tests and failures set; build it with junit_suite_element
    and junit_case). The engine knows none of them: the caller hands them over (the CLI registers the nightly
    rebuild's, dfp_cli.rebuild_report). A name the caller did not register is an error only when a report is
    written (`needed`).
    """
    registry = registry or {}
    missing = [n for n in names if n not in registry]
    if missing and needed:
        known = ", ".join(sorted(registry)) or "none"
        raise UserError(f"report_sections: {', '.join(missing)} is not a report section this caller knows (it knows: "
                        f"{known}); run the playbook through its invoke command, or drop --report/--junit")
    out = []
    for name in names:
        mod = registry.get(name)
        if mod is None:
            continue
        if not all(hasattr(mod, a) for a in ("NAME", "section", "junit_suite")):
            raise UserError(f"report_sections: {name} needs NAME, section() and junit_suite()")
        out.append(mod)
    return out


def host_sections(results: list[TaskResult], sections: list[Any]) -> dict[str, dict]:
    """{host: {section NAME: section}} for the sections that have something to say about a host."""
    out: dict[str, dict] = {}
    for host, items in by_host(results).items():
        for mod in sections:
            data = mod.section(items)
            if data is not None:
                out.setdefault(host, {})[mod.NAME] = data
    return out


# -- the JSON report ---------------------------------------------------------------------------------------
REPORT_STRING_MAX = 4096  # characters of one string in a task's data (stdout, a diff); the rest is cut with a note
REPORT_LIST_MAX = 500  # items of one list in a task's data
_IN_ENTRY = {"changed", "failed", "skipped", "msg", "warnings"}  # already fields of the task entry


def _bounded(value: Any) -> Any:
    """A task's data made report-sized: long strings and lists cut, saying by how much."""
    if isinstance(value, str) and len(value) > REPORT_STRING_MAX:
        return value[:REPORT_STRING_MAX] + f"... [cut: {len(value)} characters, the report keeps {REPORT_STRING_MAX}]"
    if isinstance(value, dict):
        return {str(k): _bounded(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        out = [_bounded(v) for v in value[:REPORT_LIST_MAX]]
        if len(value) > REPORT_LIST_MAX:
            out.append(f"... [cut: {len(value)} items, the report keeps {REPORT_LIST_MAX}]")
        return out
    return value


def task_data(r: TaskResult, secrets: Any = None) -> dict:
    """What the task's module returned (what `register` holds: acceptance rate, versions, timings), as data,
    secrets masked again with everything the run learnt by its end (a set_fact may name one late)."""
    data = {k: v for k, v in r.result.items() if k not in _IN_ENTRY}
    if secrets is not None:
        data = secrets.redact_obj(data)
    return _bounded(data)


def json_report(results: list[TaskResult], stats: dict, meta: dict, sections: Sequence[Any] = (), secrets: Any = None) -> dict:
    tasks = [dict(r.as_report(), data=task_data(r, secrets)) for r in results]
    report = {"recap": stats, "tasks": tasks, **meta}
    hosts = host_sections(results, list(sections))
    if hosts:
        report["hosts"] = hosts
    return report


def write_json(path: str, report: dict) -> None:
    write_atomically(path, (json.dumps(report, indent=2, default=str) + "\n").encode("utf-8"))
