"""Install, upgrade or remove Debian packages with apt (ansible.builtin.apt).

As Ansible's, with apt-get, apt-cache, apt-mark and dpkg-query where Ansible uses python3-apt (so no python
package is needed on the host): update_cache / cache_valid_time (apt-get update, retried; result cache_updated,
cache_update_time), upgrade (yes/safe: apt-get upgrade --with-new-pkgs, full/dist: dist-upgrade; never aptitude),
deb (a .deb on the host, with its dependencies), name as NAME, NAME=VERSION (a glob), NAME>=VERSION or a
wildcard, state present / latest / absent (purge, autoremove), install_recommends, default_release, only_upgrade,
allow_downgrade, force, dpkg_options, policy_rc_d, clean, autoclean, autoremove. Results: changed, stdout, stderr
(and diff's `prepared` plan with --diff), cache_updated and cache_update_time; Ansible's messages. Check mode runs
the same apt-get with --simulate. Runs with DEBIAN_FRONTEND=noninteractive; a held apt or dpkg lock is waited for
until lock_timeout, every apt call has a timeout. state build-dep and fixed are refused; a deb URL is refused
(get_url it first). The steps are dflash_host/host/apt_task.py's; tests/library/test_apt_against_ansible.py
compares them with ansible-core's.
"""

from __future__ import annotations

from dflash_host.host.apt_task import run
from dflash_host.module import main

ARGS = {"_groups": ("apt_options",)}
# The arguments that decide what runs or which file, folder or address is touched (engine/run/trust.py).
CODE_ARGS = ("name", "deb", "dpkg_options", "default_release", "policy_rc_d")


if __name__ == "__main__":
    main(ARGS, run)
