"""The command body of `invoke monitoring`: read the hosts, write the configuration, say what each host lacks."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from dfp_cli.monitoring.dashboard import DASHBOARD_FILE, dashboard_json, sdk_missing
from dfp_cli.monitoring.hosts import HostView, fleet_setting, view_of
from dfp_cli.monitoring.install import install, wanted
from dfp_cli.monitoring.rules import AGENT_GPU_MEMORY, GPU_MEMORY_METRIC, rules_file
from dfp_cli.monitoring.targets import RULES_FILE, scrape_config, target_files
from engine.errors import UserError

PLAYBOOK = "monitoring"
CONFIG_FILE = "prometheus.yml"
HEADER = "# Written by `invoke monitoring` (dflash-provision) from the inventory and each host's last speed record;\n" \
         "# a re-run rewrites it: change the inventory, not this file.\n"


def read_hosts(opts: dict) -> list[HostView]:
    """Every selected host's view, from one quiet read-only run of playbooks/monitoring.yaml."""
    from dfp_cli.commands import DEFAULT_INVENTORY
    from dfp_cli.options import host_defaults_of, inventories_of, limit_of, parse_extra_vars, use_vault_password_file
    from engine.api import run_playbook

    use_vault_password_file(opts.get("vault_password_file"))
    result = run_playbook(PLAYBOOK, inventories_of(opts.get("inventory"), DEFAULT_INVENTORY),
                          extra_vars=parse_extra_vars(opts.get("extra_vars")), quiet=True,
                          limit=limit_of(opts.get("host"), opts.get("group"), opts.get("limit")),
                          host_defaults=host_defaults_of(opts))
    if result.error:
        raise UserError(result.error)
    failed = {r.host: r.msg for r in result.results if r.status in ("failed", "unreachable") and not r.ignored}
    if failed:
        said = "; ".join(f"{h}: {msg}" for h, msg in sorted(failed.items()))
        raise UserError(f"could not read every host ({said}); nothing was written: reach them, or leave them out "
                        "with --limit")
    if not result.registered:
        raise UserError("no host matched: check --host/--group/--limit against `invoke inventory --list`")
    return [view_of(h, reg, opts.get("group")) for h, reg in sorted(result.registered.items())]


def documents(views: list[HostView]) -> dict[str, Any]:
    """{path relative to the output folder: data} of every file the command writes."""
    window, hold = fleet_setting(views, "monitoring_window"), fleet_setting(views, "monitoring_for")
    board = {} if sdk_missing() else {DASHBOARD_FILE: dashboard_json(window)}
    every = fleet_setting(views, "monitoring_scrape_interval")
    return {CONFIG_FILE: scrape_config(views, every), RULES_FILE: rules_file(views, window, hold), **target_files(views),
            **board}


def document_text(rel: str, data: Any) -> str:
    """A .json document as JSON (Grafana imports it; JSON has no comments), any other as YAML under HEADER."""
    if rel.endswith(".json"):
        return json.dumps(data, indent=2) + "\n"
    import yaml  # here: `invoke --list` stays fast
    return HEADER + yaml.safe_dump(data, sort_keys=False, width=1 << 16, allow_unicode=True)


def write_documents(out: str, docs: dict[str, Any]) -> list[str]:
    """Each document (document_text, keys in the order built), written whole then renamed into place."""
    written = []
    for rel, data in docs.items():
        path = Path(out) / rel
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_text(document_text(rel, data), encoding="utf-8")
            os.replace(tmp, path)
        except OSError as exc:
            raise UserError(f"--out {out}: cannot write {path} ({exc.strerror}); give a folder you can write to") from None
        written.append(str(path))
    return written


def host_lines(views: list[HostView]) -> list[str]:
    """One line per host (what it is watched for), then what it lacks."""
    lines = []
    for v in views:
        bands = ", ".join(f"c={b.concurrency} {b.verdict}" for b in v.bands) or "none"
        lines.append(f"{v.name}: vLLM {v.address}:{v.vllm_port}, node_exporter :{v.node_exporter_port}; "
                     f"k={v.k}, measured {v.measured_at_utc or 'never'}; drafter not paying at: {bands}")
        lines += [f"  {v.name}: {note}" for note in v.notes]
    if not any(v.gpu_exporter_port for v in views):
        lines.append(f"note: no host sets gpu_exporter_port: DflashGpuMemoryHeldWithoutServer reads the host agent's "
                     f"{AGENT_GPU_MEMORY} instead of {GPU_MEMORY_METRIC} (python3 -m dflash_host.monitor on each host; "
                     "docs/MONITORING.md)")
    missing = sdk_missing()
    return lines + ([f"note: {missing}"] if missing else [])


def monitoring(c: Any = None, **opts: Any) -> None:
    """`invoke monitoring --group G --out DIR`."""
    from dfp_cli.commands import fail_user

    try:
        if not opts.get("out"):
            raise UserError("--out DIR is required: the folder prometheus.yml, rules/, targets/ and grafana/ are written to")
        views = read_hosts(opts)
        install_too = wanted(views)
        written = write_documents(os.path.expanduser(opts["out"]), documents(views))
    except UserError as exc:
        raise fail_user(exc) from None
    for line in host_lines(views):
        print(line)
    print("wrote: " + ", ".join(written))
    print(f"check: promtool check config {Path(opts['out']) / CONFIG_FILE}")
    if install_too:
        try:
            install(opts, views, os.path.expanduser(opts["out"]))
        except UserError as exc:
            raise fail_user(exc) from None
