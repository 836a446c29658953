"""ansible.builtin.systemd: Ansible's other name of systemd_service (library/systemd_service.py), the same
options, steps and answers (dflash_host/host/systemd_task.py)."""

from __future__ import annotations

from dflash_host.host.systemd_task import run
from dflash_host.module import main

ARGS = {"_groups": ("systemd_options",)}
# The arguments that decide what runs or which file, folder or address is touched (engine/run/trust.py).
CODE_ARGS = ("name",)


if __name__ == "__main__":
    main(ARGS, run)
