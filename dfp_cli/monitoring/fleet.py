"""`invoke status --group G` (or -l): one line per host, from one read-only run of playbooks/monitoring.yaml.

Each host's line: running or not (and ready: /health), the served model and the commits it runs from, the acceptance
rate (the server's own since it started, else the last measurement's), the last measurement's verdict per load, k
(and tune's schedule) of the launch, the GPU memory its processes hold, and the alerts firing for it. The parts are
what `invoke status` (vllm_status, registered as `report`) and `invoke monitoring` (hosts.view_of: the launch and
speed records) already read; nothing is read twice. The alerts come from Prometheus' HTTP API
(/api/v1/alerts, bounded by a deadline) at the inventory's `prometheus_url` (or -e prometheus_url=...); without one,
or when it does not answer, the column says so and the rest stands. What Prometheus or a host returns is data:
printed, never run, followed or used as a path.
"""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
from typing import Any

from dflash_host.monitor.readings import launch_k, whole_bands
from dflash_host.speed.state import TOOL_TAG
from dfp_cli.monitoring.hosts import parsed_json, view_of
from dfp_cli.monitoring.loads import verdicts_of
from dfp_cli.summaries import _worker_lines

ALERTS_PATH = "/api/v1/alerts"
ALERTS_DEADLINE_S = 5.0
ALERTS_MAX_BYTES = 16 << 20


def shown_url(url: str) -> str:
    """The URL as printed: without a user or password in it (a secret is never printed)."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def _read_bounded(resp: Any, deadline: float, deadline_s: float) -> bytes:
    """The body, in chunks, until ALERTS_MAX_BYTES or the deadline (a server that trickles is cut off)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        if time.monotonic() > deadline:
            raise TimeoutError(f"no whole answer within {deadline_s:g} s")
        chunk = resp.read1(65536)  # one receive at a time: a trickle cannot hold it past the deadline
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > ALERTS_MAX_BYTES:
            raise ValueError(f"an answer over {ALERTS_MAX_BYTES >> 20} MiB")
        chunks.append(chunk)


def firing_by_host(url: str, deadline_s: float = ALERTS_DEADLINE_S) -> tuple[dict[str, list[str]] | None, str | None]:
    """({host: alert names firing}, None) from Prometheus at `url`, or (None, why it could not say)."""
    if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        return None, f"prometheus_url {shown_url(url)!r} is not an http(s) URL (e.g. http://prometheus:9090)"
    deadline = time.monotonic() + deadline_s
    try:
        with urllib.request.urlopen(url.rstrip("/") + ALERTS_PATH, timeout=deadline_s) as resp:  # noqa: S310
            body = _read_bounded(resp, deadline, deadline_s)
    except (OSError, ValueError) as exc:  # URLError and HTTPError are OSErrors; a timeout is one too
        return None, f"Prometheus at {shown_url(url)} did not answer ({getattr(exc, 'reason', None) or exc})"
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    alerts = (data.get("data") or {}).get("alerts") if isinstance(data, dict) else None
    if not isinstance(data, dict) or data.get("status") != "success" or not isinstance(alerts, list):
        return None, f"Prometheus at {shown_url(url)} answered {ALERTS_PATH} without a list of alerts"
    out: dict[str, list[str]] = {}
    for alert in alerts:
        labels = alert.get("labels") if isinstance(alert, dict) else None
        if isinstance(labels, dict) and alert.get("state") == "firing" and labels.get("host"):
            out.setdefault(str(labels["host"]), []).append(str(labels.get("alertname")))
    return {h: sorted(names) for h, names in out.items()}, None


def _state(report: dict) -> str:
    if report.get("unreachable"):
        return "unreachable"
    if report.get("failed"):
        return "failed"
    if report.get("running"):
        return "running"
    if report.get("torn_down"):
        return "torn down"
    return "not running" if report.get("provisioned") else "not provisioned"


def _speed_part(registered: dict, report: dict) -> dict:
    """Acceptance (the server's own, else the last measurement's) and the last measurement's verdict per load."""
    record = parsed_json(registered.get("monitoring_record"))
    last = record.get("last") if record.get("tool") == TOOL_TAG and isinstance(record.get("last"), dict) else {}
    live = _number(report.get("acceptance_rate"))
    measured = _number(last.get("acceptance_rate")) if last else None
    return {"acceptance_rate": live if live is not None else measured,
            "acceptance_from": "server" if live is not None else ("last measurement" if measured is not None else None),
            "verdicts": {str(c): v for c, v in sorted(verdicts_of(last).items())} if last else {},
            "measured_at_utc": last.get("measured_at_utc") if last else None}


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _whole(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def row_of(host: str, registered: dict | None, report: dict, group: str | None) -> dict:
    """One host's line as data (what --json prints)."""
    row: dict = {"host": host, "state": _state(report), "ready": None, "served_model": None, "target_commit": None,
                 "drafter_commit": None, "acceptance_rate": None, "acceptance_from": None, "verdicts": {},
                 "measured_at_utc": None, "k": None, "schedule": None, "gpu_used_mib": _whole(report.get("gpu_used_mib")),
                 "alerts": None, "alerts_note": None, "role": report.get("role"), "rank": report.get("rank"),
                 "nnodes": report.get("nnodes"), "local_workers": report.get("local_workers"), "msg": report.get("msg")}
    if registered is None or row["state"] in ("unreachable", "failed"):
        return row
    view = view_of(host, registered, group)
    launch = parsed_json(registered.get("monitoring_launch"))
    k, schedule = launch_k(launch) if launch else (view.k, None)
    row.update(ready=report.get("health") == "ok" if row["state"] == "running" else None,
               served_model=report.get("served_model") or view.served_model, target_commit=view.target_commit,
               drafter_commit=view.drafter_commit, k=_whole(k) if _whole(k) is not None else view.k,
               schedule=whole_bands(schedule) or whole_bands((report.get("speed") or {}).get("schedule")),
               **_speed_part(registered, report))
    return row


def add_alerts(rows: list[dict], url: str | None) -> None:
    """Each row's alerts firing (a list, empty when none), or the note saying why they are not known."""
    found: dict[str, list[str]] | None = None
    note: str | None = "no prometheus_url set in the inventory"
    if url:
        found, note = firing_by_host(url)
    for row in rows:
        row["alerts"] = None if found is None else found.get(row["host"], [])
        row["alerts_note"] = note


def _commit(sha: str | None) -> str:
    return sha[:12] if sha else "?"


def line_of(row: dict) -> str:
    """The row as one line a person reads."""
    head = {"running": "RUNNING", "not running": "NOT RUNNING", "torn down": "NOT RUNNING (torn down)",
            "not provisioned": "NOT PROVISIONED", "unreachable": "UNREACHABLE", "failed": "FAILED"}[row["state"]]
    if row.get("role") in ("head", "worker"):
        head += f"  ({'head' if row['role'] == 'head' else 'headless node'}, rank {row['rank']} of {row['nnodes']})"
    if row["state"] in ("unreachable", "failed"):
        return f"{row['host']}: {head}: {row['msg']}"
    parts = [("ready" if row["ready"] else "not ready") if row["ready"] is not None else None]
    if row["served_model"]:
        parts.append(f"serves {row['served_model']} (target {_commit(row['target_commit'])}, "
                     f"drafter {_commit(row['drafter_commit'])})")
    rate = row["acceptance_rate"]
    parts.append(f"acceptance {rate:.1%} ({row['acceptance_from']})" if rate is not None else "acceptance n/a")
    verdicts = ", ".join(f"c={c} {v}" for c, v in row["verdicts"].items())
    parts.append(f"loads: {verdicts}" if verdicts else "loads: not measured")
    schedule = "; per batch size " + ", ".join(f"{a}-{b}: {kk}" for a, b, kk in row["schedule"]) \
        if row["schedule"] else ""
    parts.append(f"k={row['k'] if row['k'] is not None else '?'}{schedule}")
    parts.append(f"GPU {row['gpu_used_mib']} MiB" if row["gpu_used_mib"] is not None else "GPU n/a")
    parts.extend(w.strip() for w in _worker_lines(row))  # a node of a serving cluster: its local workers
    alerts = row["alerts"]
    parts.append(f"alerts: {row['alerts_note']}" if alerts is None else f"alerts: {', '.join(alerts) or 'none'}")
    return f"{row['host']}: {head}  " + "  ".join(p for p in parts if p)


def prometheus_url_of(inventories: list, hosts: list[str], extra_vars: dict) -> str | None:
    """-e prometheus_url=..., else the inventory's (the first of the hosts that sets it: a fleet has one Prometheus)."""
    if extra_vars.get("prometheus_url"):
        return str(extra_vars["prometheus_url"])
    from engine.api import Inventory

    inv = Inventory(inventories)
    for host in hosts:
        value = inv.hosts[host].vars.get("prometheus_url") if host in inv.hosts else None
        if value:
            return str(value)
    return None


def fleet_rows(result: Any, reports: dict[str, dict], group: str | None, url: str | None) -> list[dict]:
    """Every host's row, in name order, with the alerts from Prometheus at `url`."""
    rows = [row_of(h, result.registered.get(h), reports[h], group) for h in sorted(reports)]
    add_alerts(rows, url)
    return rows
