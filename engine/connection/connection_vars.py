"""Connection variables given as templates (`ansible_python_interpreter="{{ ansible_playbook_python }}"` in an
inventory), rendered as Ansible renders them before it connects.

They render with the host's inventory variables and the run's magic names only: nothing a host returned
(facts, registered results) exists at that point, so a connection setting never comes from host data
(docs/SAFETY.md)."""

from __future__ import annotations

import dataclasses
import sys

from engine.errors import HostUnreachable
from engine.inventory.manager import Host

CONNECTION_PREFIXES = ("ansible_python_interpreter", "ansible_host", "ansible_port", "ansible_user",
                       "ansible_connection", "ansible_ssh_", "ansible_private_key_file")


def _is_template(value: object) -> bool:
    return isinstance(value, str) and ("{{" in value or "{%" in value)


def rendered_host(host: Host) -> Host:
    """The host with its templated connection variables rendered (the same Host when none is a template)."""
    names = [k for k, v in host.vars.items() if k.startswith(CONNECTION_PREFIXES) and _is_template(v)]
    if not names:
        return host
    from engine.template.environment import environment
    from engine.template.templar import Templar

    templar = Templar(environment())
    scope = dict(host.vars, inventory_hostname=host.name, ansible_playbook_python=sys.executable,
                 group_names=[g for g in host.groups if g not in ("all", "ungrouped")])
    values = dict(host.vars)
    for name in names:
        try:
            values[name] = templar.render_value(host.vars[name], scope)
        except Exception as exc:  # a template error of any kind: the host cannot be reached as configured
            raise HostUnreachable(
                f"{name} of host {host.name} is a template that cannot be rendered ({type(exc).__name__}: {exc}). "
                "Fix its value in the inventory (it may use the host's inventory variables and "
                "ansible_playbook_python)."
            ) from None
    return dataclasses.replace(host, vars=values)
