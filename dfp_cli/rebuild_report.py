"""The nightly rebuild's report section (playbooks/rebuild.yaml asks for it with `report_sections`): per host,
what it built, each phase and its server steps, the serving downtime and the rollback; in JUnit, one test case
per phase with the versions and the downtime as suite properties.
"""

from __future__ import annotations

import json
from typing import Any

from engine.api import ACCEPTED_PREFIX, TaskResult

NAME = "rebuild"


PHASE_FACT = "rebuild_phase"
ACCEPTED = ACCEPTED_PREFIX


def _phase_fact(r: TaskResult):
    facts = r.result.get("ansible_facts") if r.module == "set_fact" else None
    return facts.get(PHASE_FACT) if isinstance(facts, dict) else None


def _failed(r: TaskResult) -> bool:
    """A failure, including one a failed_when let pass."""
    return (r.status in ("failed", "unreachable") and not r.ignored) or r.accepted


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
        "msg": failed[0].msg.removeprefix(ACCEPTED) if failed and failed[0].accepted else failed[0].msg if failed else "",
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


def junit_suite(host: str, section: dict):
    """The rebuild's phases as test cases; versions, downtime and the rollback as suite properties."""
    import xml.etree.ElementTree as ET  # noqa: N817 - the usual name (both only for a run that writes --junit)

    from engine.api import junit_case, junit_suite_element, xml_text

    phases = section["phases"]
    fails = sum(1 for p in phases if p["status"] == "failed")
    skips = sum(1 for p in phases if p["status"] == "skipped")
    suite = junit_suite_element(host + " rebuild", len(phases), fails, skips, sum(p["duration_s"] for p in phases))
    props = ET.SubElement(suite, "properties")
    for key in ("mode", "old_env", "new_env", "old_versions", "new_versions", "switched", "rolled_back", "downtime_s"):
        ET.SubElement(props, "property", {"name": key, "value": xml_text(json.dumps(section.get(key), default=str))})
    for p in phases:
        failed = p["msg"] if p["status"] == "failed" else None
        skipped = "nothing to do in this phase" if p["status"] == "skipped" else None
        suite.append(junit_case(f"{host}.rebuild", p["name"], p["duration_s"], failed, skipped, f"{p['tasks']} task(s)"))
    return suite


section = rebuild_section  # the name engine/report/console.py asks a section module for
