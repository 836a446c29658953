"""Start, stop, restart, reload, enable, disable, mask a systemd unit (ansible.builtin.systemd_service).

As Ansible's: daemon_reload / daemon_reexec first (not in check mode), then the unit's `systemctl show` read
into `status`; masked (mask/unmask), enabled (enable/disable, after `is-enabled -l`), state (started: start
when not active/activating; stopped: stop when active, activating or deactivating; restarted/reloaded: always,
a unit not running is started) each only where it differs, in that order; check mode says what would change and
runs none of it. scope user asks the calling user's manager (--user, XDG_RUNTIME_DIR set when missing), no_block
adds --no-block, force --force. Result: name, changed, status (the show dict), enabled and state when asked
(restarted/reloaded answer state "started"). A unit systemd does not know (and no /etc/init.d script) fails with
"Could not find the requested service NAME: host"; a glob in the name is refused. Unit names follow `--`, so a
name is never read as an option. The steps are dflash_host/host/systemd_task.py's (systemctl through dflash_host/host/systemd.py).
library/systemd.py (Ansible's alias `systemd`) and library/service.py (on a systemd host) run this.
tests/library/test_systemd_against_ansible.py runs Ansible's and ours against a stand-in systemctl on PATH (this
machine has no running systemd).
"""

from __future__ import annotations

from dflash_host.host.systemd_task import run
from dflash_host.module import main

ARGS = {"_groups": ("systemd_options",)}
# The arguments that decide what runs or which file, folder or address is touched (engine/run/trust.py).
CODE_ARGS = ("name",)


if __name__ == "__main__":
    main(ARGS, run)
