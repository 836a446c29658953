"""Reporting: the console a person follows, and the JSON report a job keeps (the JUnit XML one: engine/report/junit.py)."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any, Callable, TextIO

from engine.cache import write_atomically
from engine.errors import UserError
from engine.report.ansible_format import (
    INCLUDES,
    banner,
    include_lines,
    meta_message,
    meta_once,
    recap_line,
    result_lines,
)
from engine.report.origin import Locator, origin_lines
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
    """ansible-playbook's default output (engine/report/ansible_format.py: PLAY/TASK banners, one line per host
    result, [WARNING]/[ERROR] lines, a PLAY RECAP) and, on top, a live line for long tasks."""

    LIVE_AFTER_S = 3.0

    def __init__(self, stream: TextIO | None = None, verbose: int = 0, show_diff: bool = False, quiet: bool = False,
                 err: TextIO | None = None) -> None:
        self.out = stream or sys.stdout
        self.err = err if err is not None else (sys.stderr if stream is None else self.out)
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
        self._meta_shown = False
        self._title = ""
        self._source: str | None = None
        self._origin: list[str] | None = None
        self._locator = Locator()
        # the run's secret masking (the runner sets it): the Origin block quotes playbook lines, which may hold a
        # secret written in the playbook (a play's vars beside the task)
        self.redact: Callable[[str], str] = lambda text: text
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    def _color(self, text: str, status: str) -> str:
        if not self.tty or status not in _COLORS:
            return text
        return f"\033[{_COLORS[status]}m{text}\033[0m"

    def _write(self, line: str, stream: TextIO | None = None) -> None:
        """One line, or several at once (a host's result: another host's lines never come between them)."""
        if self.quiet:
            return
        with self._lock:
            if self._live_shown:
                self.out.write("\r\033[K")
                self._live_shown = False
            target = stream or self.out
            target.write(line + "\n")
            target.flush()

    def _banner(self, title: str) -> None:
        self._title = title
        self._write("\n" + self._banner_line(title))

    def _banner_line(self, title: str) -> str:
        """Ansible's width: the terminal's less one (at least 79; 79 when not a terminal)."""
        return banner(title, max(79, shutil.get_terminal_size((0, 20)).columns - 1) if self.tty else 79)

    def debug(self, text: str) -> None:
        """Ansible's ANSIBLE_DEBUG line (process id, time, text) for the few engine steps scripts grep for; only
        where ANSIBLE_DEBUG is on."""
        if os.environ.get("ANSIBLE_DEBUG", "").strip().lower() in ("1", "true", "yes", "on"):
            self._write(f"{os.getpid():6d} {time.time():0.5f}: {text}")

    def warning(self, text: str) -> None:
        """Ansible's `[WARNING]: ...` line, on stderr."""
        self._write(self._color(f"[WARNING]: {printable(text, indent='')}", "warn"), self.err)

    def playbook_start(self, playbook: str, plays: int) -> None:
        """From -vv, Ansible's `PLAYBOOK: NAME` banner and `N plays in PATH` line (scripts count the plays)."""
        if self.verbose > 1:
            self._banner(f"PLAYBOOK: {os.path.basename(playbook)}")
            self._write(f"{plays} plays in {playbook}")

    def play_start(self, play, hosts: list[str]) -> None:
        name = str(play.name or "").strip()
        self._banner(f"PLAY [{name}]" if name else "PLAY")
        if not hosts:
            self._write(self._color("skipping: no hosts matched", "skipped"))

    def task_start(self, name: str, role: str | None, hosts: list[str], handler: bool = False,
                   source: str | None = None) -> None:
        kind = "RUNNING HANDLER" if handler else "TASK"
        if name == "Gathering facts" and role is None and not handler:
            name = "Gathering Facts"  # Ansible's words for a play's fact gathering
        self._banner(f"{kind} [{role + ' : ' if role else ''}{name}]")
        with self._lock:
            self._task = name
            self._started = time.monotonic()
            self._next_plain = self._started + 10
            self._pending = set(hosts)
            self._last_progress = {}
            self._meta_shown = False
            self._source, self._origin = source, None
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
        for w in res.result.get("warnings", []) or []:
            self.warning(str(w))
        lines = [self._color(line, status) for line, status in self._lines(res)]
        if self.show_diff or res.diff:  # -D, or the task's `diff: true` (as ansible-playbook shows it)
            lines += [printable(format_diff(diff), indent="") for diff in changed_diffs(res.result)]
        if self.verbose >= 2 and res.result.get("exception"):
            lines.append(printable(str(res.result["exception"]), indent=""))
        if lines:
            self._write("\n".join(lines))

    def _lines(self, res: TaskResult) -> list[tuple[str, str]]:
        """The result's lines as Ansible's callback prints them (an include's `included:`, a meta task's
        `META:` from -vv), a long task's seconds after its plain status line."""
        if res.module in INCLUDES and res.status in ("ok", "changed"):
            where = self._source.split(": task ", 1)[0] if self._source else None
            base = os.path.dirname(os.path.abspath(where)) if where else None
            return [(line, "skipped") for line in include_lines(res, base)]
        if res.module == "meta":
            return self._meta_lines(res)
        lines = result_lines(res, self.verbose)
        if any(line.startswith("[ERROR]: ") for line, _ in lines):
            origin = self._origin_of(res)
            quoted = "\n".join(self.redact(text) for text in origin)
            lines = [(f"{line}\n{quoted}", s) if origin and line.startswith("[ERROR]: ") else (line, s)
                     for line, s in lines]
        if res.duration_s >= 1.0 and len(lines) == 1 and " => " not in lines[0][0]:
            lines[0] = (f"{lines[0][0]} ({res.duration_s:.1f}s)", lines[0][1])
        return lines

    def _origin_of(self, res: TaskResult) -> list[str]:
        """The Origin block under a failure's [ERROR] line (engine/report/origin.py), found once per task."""
        with self._lock:
            if self._origin is None:
                where = self._locator.find(self._source, res.task, res.module)
                self._origin = origin_lines(os.path.abspath(where[0]), where[1], where[2]) if where else []
            return self._origin

    def _meta_lines(self, res: TaskResult) -> list[tuple[str, str]]:
        """A meta task as Ansible shows it: its banner again for each host after the first when it runs per host,
        `META: ...` from -vv (once when it runs once for all hosts), `skipping: [h]` when its `when` was false."""
        with self._lock:
            first, self._meta_shown = not self._meta_shown, True
        lines = [] if first or meta_once(res) else [("\n" + self._banner_line(self._title), "")]
        if res.status == "skipped":
            return lines + result_lines(res, self.verbose)
        if self.verbose >= 2 and (first or not meta_once(res)):
            lines.append((f"META: {meta_message(res)}", "ok"))
        return lines

    def recap(self, stats: dict[str, dict], elapsed: float) -> None:
        self._stop.set()
        self._banner("PLAY RECAP")
        for host in sorted(stats):
            counts = stats[host]
            status = (
                "failed"
                if counts["failed"]
                else "unreachable"
                if counts["unreachable"]
                else "changed"
                if counts["changed"]
                else "ok"
            )
            self._write(self._color(recap_line(host, counts), status))
        self._write("")
        self._write(f"{elapsed:.2f}s")


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
    if isinstance(diff, list):  # copy's, as Ansible's action registers it
        return [d for d in diff if isinstance(d, dict)] if result.get("changed") else []
    return [diff] if result.get("changed") and isinstance(diff, dict) else []


def format_diff(diff: dict) -> str:
    import difflib

    if isinstance(diff.get("prepared"), str):  # a plan, not a before/after (apt's, as Ansible's callback shows it)
        return "\n".join("    " + line for line in diff["prepared"].splitlines())
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
        if counts is None or r.module == "meta" or r.notice:  # Ansible counts no meta task (noop, end_*, ...)
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
