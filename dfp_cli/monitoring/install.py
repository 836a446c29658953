"""`invoke monitoring ... -e monitoring_install=true`: after the files are written, node_exporter on the watched
hosts and Prometheus on monitoring_host (playbooks/monitoring-install.yaml, roles/monitoring)."""

from __future__ import annotations

from pathlib import Path

from dfp_cli.monitoring.hosts import HostView, agreed_setting
from engine.errors import UserError

PLAYBOOK = "monitoring-install"


def one_setting(views: list[HostView], name: str) -> object:
    """A setting the install reads once for the fleet (monitoring_install, monitoring_host)."""
    return agreed_setting(views, name, "the install reads")


def wanted(views: list[HostView]) -> bool:
    return one_setting(views, "monitoring_install") is True


def install(opts: dict, views: list[HostView], out: str) -> dict:
    """Run the install playbook on the watched hosts and monitoring_host; the recap per host. A failed host
    stops the command with the engine's message (the files stay written)."""
    from dfp_cli.commands import DEFAULT_INVENTORY
    from dfp_cli.options import host_defaults_of, inventories_of, parse_extra_vars
    from engine.api import run_playbook

    server = str(one_setting(views, "monitoring_host") or "")
    if not server:
        raise UserError("monitoring_host is empty; name the inventory host Prometheus is installed on "
                        "(-e monitoring_host=NAME, or in the inventory's vars)")
    watched = [v.name for v in views]
    extra = {**parse_extra_vars(opts.get("extra_vars")), "monitoring_config_src": str(Path(out).resolve()),
             "monitoring_watched": watched}
    result = run_playbook(PLAYBOOK, inventories_of(opts.get("inventory"), DEFAULT_INVENTORY), extra_vars=extra,
                          limit=",".join(dict.fromkeys(watched + [server])), quiet=False,
                          host_defaults=host_defaults_of(opts))
    if result.error:
        named = f" (monitoring_host is {server!r}: name an inventory host, -e monitoring_host=NAME)" \
            if repr(server) in result.error else ""
        raise UserError(f"{result.error}{named}; the files are written, nothing was installed")
    if server not in result.recap:
        raise UserError(f"monitoring_host {server!r} is not a host of the inventory; add it, or name one with "
                        "-e monitoring_host=NAME (files written, nothing installed there)")
    failed = {r.host: r.msg for r in result.results if r.status in ("failed", "unreachable") and not r.ignored}
    if failed:
        said = "; ".join(f"{h}: {msg}" for h, msg in sorted(failed.items()))
        raise UserError(f"the install failed on {said}; the files are written: fix it and run again")
    return result.recap
