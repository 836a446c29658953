"""Ansible's setup module: the host's facts under Ansible's names, returned as `ansible_facts` (the engine keeps them
as the host's facts: `ansible_facts.distribution`, `ansible_distribution`).

`gather_subset` and `filter` choose as in Ansible (dflash_host/host/ansible_facts.py); `gather_timeout` is taken
(nothing here waits: no program runs); local facts from `fact_path` are not read (`ansible_local` is `{}`).
It never changes the host.
"""

from __future__ import annotations

from dflash_host.host.ansible_facts import BadSubset, gather
from dflash_host.module import Context, ModuleError, main

ARGS = {
    "gather_subset": {"type": "list", "default": ["all"],
                      "help": "which facts: all, min, hardware, network, a fact group; !NAME leaves one out"},
    "filter": {"type": "list", "default": [], "help": "fnmatch patterns of the fact names to return"},
    "gather_timeout": {"type": "int", "default": 10, "help": "taken for Ansible's sake: no collector waits here"},
    "fact_path": {"type": "path", "default": "/etc/ansible/facts.d",
                  "help": "taken for Ansible's sake: local facts are not read (ansible_local is {})"},
}
# The arguments that decide what runs or which file, folder or address is touched (engine/run/trust.py).
CODE_ARGS = ("fact_path",)


def split_commas(values: list) -> list[str]:
    """Ansible's list arguments: `gather_subset: "!all,network"` is two entries."""
    return [part.strip() for value in values for part in str(value).split(",") if part.strip()]


def run(args: dict, ctx: Context) -> dict:
    try:
        facts = gather(split_commas(args["gather_subset"]), split_commas(args["filter"]))
    except BadSubset as exc:
        raise ModuleError(str(exc)) from None
    return {"changed": False, "ansible_facts": facts}


if __name__ == "__main__":
    main(ARGS, run)
