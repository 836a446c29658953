"""Reporting: the console a person follows, and the JSON and JUnit XML reports a job keeps."""

from __future__ import annotations

import json
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any, TextIO

from engine.results import STATUSES, TaskResult

_COLORS = {"ok": "32", "changed": "33", "failed": "31", "unreachable": "31;1", "skipped": "36", "warn": "35"}


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
                waiting = sorted(self._pending)
                note = ""
                if len(waiting) == 1 and waiting[0] in self._last_progress:
                    note = f": {self._last_progress[waiting[0]]}"
                hosts = ", ".join(waiting[:4]) + (f" +{len(waiting) - 4}" if len(waiting) > 4 else "")
                line = f"  ... {self._task} still running after {elapsed:.0f}s on {hosts}{note}"
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
        line = f"{label}: [{res.host}]"
        show_msg = res.status in ("failed", "unreachable", "changed") or self.verbose or res.module in ("debug", "assert")
        if res.msg and show_msg and res.status != "skipped":
            line += f" {res.msg}" if res.status not in ("failed", "unreachable") else f"\n    {res.msg}"
        elif res.status == "skipped" and self.verbose and res.msg:
            line += f" {res.msg}"
        if res.duration_s >= 1.0:
            line += f" ({res.duration_s:.1f}s)"
        self._write(self._color(line, res.status))
        for w in res.result.get("warnings", []) or []:
            self._write(self._color(f"  [WARNING] [{res.host}] {w}", "warn"))
        if self.show_diff and res.changed and isinstance(res.result.get("diff"), dict):
            self._write(format_diff(res.result["diff"]))
        if self.verbose >= 2 and res.result.get("exception"):
            self._write(res.result["exception"])

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


def format_diff(diff: dict) -> str:
    import difflib

    before, after = diff.get("before"), diff.get("after")
    if isinstance(before, str) and isinstance(after, str):
        lines = difflib.unified_diff(before.splitlines(), after.splitlines(), "before", "after", lineterm="")
        return "\n".join("    " + line for line in lines)
    return f"    before: {json.dumps(before, default=str)}\n    after:  {json.dumps(after, default=str)}"


def recap_of(results: list[TaskResult], hosts: list[str]) -> dict[str, dict]:
    stats = {h: {s: 0 for s in STATUSES} for h in hosts}
    for r in results:
        key = "ignored" if r.ignored else "rescued" if r.rescued else r.status
        stats.setdefault(r.host, {s: 0 for s in STATUSES})[key] += 1
    return stats


def by_host(results: list[TaskResult]) -> dict[str, list[TaskResult]]:
    out: dict[str, list[TaskResult]] = {}
    for r in results:
        out.setdefault(r.host, []).append(r)
    return out


def json_report(results: list[TaskResult], stats: dict, meta: dict) -> dict:
    report = {"recap": stats, "tasks": [r.as_report() for r in results], **meta}
    rebuilds = {host: rebuild_section(items) for host, items in by_host(results).items()}
    hosts = {host: {"rebuild": section} for host, section in rebuilds.items() if section is not None}
    if hosts:
        report["hosts"] = hosts
    return report


def write_json(path: str, report: dict) -> None:
    Path(path).write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")


def write_junit(path: str, results: list[TaskResult], name: str) -> None:
    """One testsuite per host, one testcase per task: CI systems show failed steps directly. A nightly
    rebuild adds one testsuite per host with one testcase per phase (build, serve, switch, rollback, ...)."""
    from xml.sax.saxutils import quoteattr

    hosts = by_host(results)
    suites = [_task_suite(host, items) for host, items in hosts.items()]
    sections = {host: rebuild_section(items) for host, items in hosts.items()}
    suites += [_rebuild_suite(host, sec) for host, sec in sections.items() if sec is not None]
    tests = sum(s[0] for s in suites)
    failures = sum(s[1] for s in suites)
    parts = ['<?xml version="1.0" encoding="UTF-8"?>']
    parts.append(f'<testsuites name={quoteattr(name)} tests="{tests}" failures="{failures}">')
    for _, _, lines in suites:
        parts.extend(lines)
    parts.append("</testsuites>")
    Path(path).write_text("\n".join(parts) + "\n", encoding="utf-8")


def _case(classname: str, label: str, seconds: float, failed_msg: str | None, skipped_msg: str | None, out: str | None) -> list:
    from xml.sax.saxutils import escape, quoteattr

    lines = [f'    <testcase classname={quoteattr(classname)} name={quoteattr(label)} time="{seconds:.3f}">']
    if failed_msg is not None:
        lines.append(f"      <failure message={quoteattr(failed_msg[:500])}>{escape(failed_msg)}</failure>")
    elif skipped_msg is not None:
        lines.append(f"      <skipped message={quoteattr(skipped_msg[:200])}/>")
    elif out:
        lines.append(f"      <system-out>{escape(out)}</system-out>")
    lines.append("    </testcase>")
    return lines


def _task_suite(host: str, items: list[TaskResult]) -> tuple[int, int, list]:
    from xml.sax.saxutils import quoteattr

    fails = sum(1 for r in items if r.status in ("failed", "unreachable") and not r.ignored)
    skips = sum(1 for r in items if r.status == "skipped")
    t = sum(r.duration_s for r in items)
    lines = [f'  <testsuite name={quoteattr(host)} tests="{len(items)}" failures="{fails}" skipped="{skips}" time="{t:.3f}">']
    for r in items:
        label = f"{r.role} : {r.task}" if r.role else r.task
        failed = r.msg if r.status in ("failed", "unreachable") and not r.ignored else None
        skipped = r.msg if r.status == "skipped" else None
        lines += _case(host, label, r.duration_s, failed, skipped, "changed" if r.changed else None)
    lines.append("  </testsuite>")
    return len(items), fails, lines


def _rebuild_suite(host: str, section: dict) -> tuple[int, int, list]:
    """The rebuild's phases as test cases; versions, downtime and the rollback as suite properties."""
    from xml.sax.saxutils import quoteattr

    phases = section["phases"]
    fails = sum(1 for p in phases if p["status"] == "failed")
    skips = sum(1 for p in phases if p["status"] == "skipped")
    t = sum(p["duration_s"] for p in phases)
    lines = [
        f'  <testsuite name={quoteattr(host + " rebuild")} tests="{len(phases)}" failures="{fails}" '
        f'skipped="{skips}" time="{t:.3f}">',
        "    <properties>",
    ]
    for key in ("mode", "old_env", "new_env", "old_versions", "new_versions", "switched", "rolled_back", "downtime_s"):
        lines.append(f"      <property name={quoteattr(key)} value={quoteattr(json.dumps(section.get(key), default=str))}/>")
    lines.append("    </properties>")
    for p in phases:
        failed = p["msg"] if p["status"] == "failed" else None
        skipped = "nothing to do in this phase" if p["status"] == "skipped" else None
        lines += _case(f"{host}.rebuild", p["name"], p["duration_s"], failed, skipped, f"{p['tasks']} task(s)")
    lines.append("  </testsuite>")
    return len(phases), fails, lines


# ---------------------------------------------------------------------------------------------------
# The nightly rebuild (playbooks/rebuild.yaml): per host, what it built, each phase, the downtime, the rollback

PHASE_FACT = "rebuild_phase"
ACCEPTED = "(failure accepted by failed_when) "  # the engine's prefix when failed_when let a failure pass


def _phase_fact(r: TaskResult):
    facts = r.result.get("ansible_facts") if r.module == "set_fact" else None
    return facts.get(PHASE_FACT) if isinstance(facts, dict) else None


def _failed(r: TaskResult) -> bool:
    """A failure, including one the playbook let pass to roll back (vllm_start_may_fail)."""
    return (r.status in ("failed", "unreachable") and not r.ignored) or r.msg.startswith(ACCEPTED)


def phase_groups(items: list[TaskResult]) -> list[tuple[str, list[TaskResult]]] | None:
    """The host's tasks cut into the phases named by the playbook's `rebuild_phase` facts; None without any.

    A fact names the phase of every task after it: a name, or {role: name, "*": name of other tasks}.
    Tasks before the first fact (facts gathering) belong to the phase it names for them.
    """
    facts = [f for f in map(_phase_fact, items) if f is not None]
    if not facts:
        return None
    naming = facts[0]
    groups: list[tuple[str, list[TaskResult]]] = []
    for r in items:
        fact = _phase_fact(r)
        if fact is not None:
            naming = fact
            continue
        name = str(naming.get(r.role, naming.get("*", "other")) if isinstance(naming, dict) else naming)
        if not groups or groups[-1][0] != name:
            groups.append((name, []))
        groups[-1][1].append(r)
    return groups


def _phase_summary(name: str, tasks: list[TaskResult]) -> dict:
    ran = [r for r in tasks if r.status != "skipped"]
    failed = [r for r in ran if _failed(r)]
    out: dict[str, Any] = {
        "name": name,
        "status": "failed" if failed else "passed" if ran else "skipped",
        "duration_s": round(sum(r.duration_s for r in tasks), 3),
        "tasks": len(ran),
        "msg": failed[0].msg[len(ACCEPTED):] if failed and failed[0].msg.startswith(ACCEPTED) else failed[0].msg if failed else "",
    }
    server = _server_steps(ran)
    if server:
        out["server"] = server
    return out


def _server_steps(tasks: list[TaskResult]) -> dict:
    """The last server start of a phase, step by step: stopping the old one, readiness, smoke, acceptance."""
    starts = [r.result for r in tasks if r.module == "vllm_server" and ("ready_s" in r.result or r.result.get("start_failed"))]
    if not starts:
        return {}
    res = starts[-1]
    steps = {
        "stop_s": (res.get("stopped") or {}).get("seconds"),
        "ready_s": res.get("ready_s"),
        "smoke_s": res.get("smoke_s"),
        "after_ready_s": round(res["total_s"] - res["ready_s"], 3) if "total_s" in res and "ready_s" in res else None,
        "acceptance_rate": res.get("acceptance_rate"),
        "start_failed": bool(res.get("start_failed")),
    }
    return {k: v for k, v in steps.items() if v is not None}


def serving_downtime(items: list[TaskResult]) -> tuple[float, bool]:
    """(seconds without a healthy server, whether one is healthy at the end), from the vllm_server results.

    A task that (re)started the server (its result has ready_s or start_failed) stopped the old one first:
    down from its start to its readiness (its duration less what came after readiness: total_s - ready_s).
    A failed start is down all through, and so is everything after it until a start is ready again.
    """
    total, down = 0.0, False
    for r in items:
        res = r.result
        restart = r.module == "vllm_server" and r.status != "skipped" and ("ready_s" in res or res.get("start_failed"))
        if restart and "ready_s" in res and not res.get("start_failed"):
            after = max(0.0, float(res.get("total_s") or res["ready_s"]) - float(res["ready_s"]))
            total += max(0.0, r.duration_s - after)
            down = False
        elif restart or down:
            total += r.duration_s
            down = True
    return round(total, 3), not down


def _last(items: list[TaskResult], test) -> dict:
    found = [r.result for r in items if r.status != "skipped" and test(r)]
    return found[-1] if found else {}


def rebuild_section(items: list[TaskResult]) -> dict | None:
    """What the nightly rebuild did on one host: None when the run was not a rebuild (no phase facts)."""
    groups = phase_groups(items)
    if groups is None:
        return None
    phases = [_phase_summary(name, tasks) for name, tasks in groups]
    build = _last(items, lambda r: r.module == "python_env" and r.result.get("fresh"))
    switch = _last(items, lambda r: r.module == "python_env" and r.result.get("switched"))
    back_up = [
        r for name, tasks in groups if name == "rollback" for r in tasks
        if r.module == "vllm_server" and "ready_s" in r.result and not _failed(r)
    ]
    failed = [p for p in phases if p["status"] == "failed"]
    downtime, serving = serving_downtime(items)
    return {
        "mode": build.get("rebuild_mode"),
        "old_env": build.get("previous"),
        "new_env": build.get("env"),
        "old_versions": build.get("previous_versions"),
        "new_versions": build.get("versions"),
        "switched": bool(switch),
        "rolled_back": bool(back_up),
        "reason": failed[0]["msg"] if failed else None,
        "failed_phase": failed[0]["name"] if failed else None,
        "downtime_s": downtime,
        "serving": serving,
        "phases": phases,
    }
