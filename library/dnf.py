"""Install, upgrade or remove packages with dnf (ansible.builtin.dnf), on Fedora/RHEL-family hosts.

name (NAME, NAME-VERSION, 'NAME >= VERSION', @group, a path), state present/installed, latest, absent/removed,
update_cache, enablerepo / disablerepo, install_weak_deps, exclude, disable_gpg_check, autoremove,
allow_downgrade, update_only, lock_timeout; results msg, results, rc and changed as Ansible's. Run through the dnf
and rpm programs (dflash_host/host/dnf_task.py), where Ansible uses python3-dnf; check mode decides from rpm -q and
dnf check-update. A host without dnf is refused with a clear message (use apt there, or package). Ansible's other
dnf options (list, download_only, security, installroot, releasever, conf_file, ...) are refused when the
playbook loads.
"""

from __future__ import annotations

from dflash_host.host.dnf_task import run
from dflash_host.module import main

ARGS = {"_groups": ("dnf_options",)}
# The arguments that decide what runs or which file, folder or address is touched (engine/run/trust.py).
CODE_ARGS = ("name", "enablerepo", "disablerepo", "exclude")


if __name__ == "__main__":
    main(ARGS, run)
