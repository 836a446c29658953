"""Install, upgrade or remove packages with the host's own package manager (ansible.builtin.package).

As Ansible's: `use` auto (or the variable ansible_package_use) picks the manager as Ansible's pkg_mgr fact does
(dflash_host/host/ansible_facts.py): apt on Debian/Ubuntu, dnf on Fedora/RHEL; the task then runs as that module
(dflash_host/host/apt_task.py, dnf_task.py) with every option given passed on, and one it does not have refused
there (Ansible's "Unsupported parameters"). Another manager (zypper, pacman, apk, ...) is refused, naming it.
"""

from __future__ import annotations

from dflash_host.host import ansible_facts, apt_task, dnf_task
from dflash_host.module import Context, ModuleError, check_args, main

ARGS = {
    "name": {"type": "list", "default": None, "help": "the packages (each manager's own spelling of versions)"},
    "state": {"type": "str", "default": None,
              "help": "present, latest or absent (or the manager's own states); none: the manager's default"},
    "use": {"type": "str", "default": "auto", "var": "ansible_package_use",
            "help": "the manager: auto (the host's, as Ansible's pkg_mgr fact), apt or dnf"},
    "_groups": ("package_options",),
}
# The arguments that decide what runs or which file, folder or address is touched (engine/run/trust.py).
CODE_ARGS = ("name", "deb", "dpkg_options", "default_release", "policy_rc_d", "enablerepo", "disablerepo", "exclude")
MANAGERS = {"apt": ({"_groups": ("apt_options",)}, apt_task.run), "dnf": ({"_groups": ("dnf_options",)}, dnf_task.run)}


def manager(use: str) -> str:
    """The manager the task runs: `use`, or with auto the host's pkg_mgr fact."""
    if use == "auto":
        family = ansible_facts.distribution_facts().get("os_family") or ""
        use = ansible_facts.pkg_mgr_facts(family)["pkg_mgr"]
        if use == "unknown":
            raise ModuleError("Could not detect which package manager to use. Try gathering facts or setting the "
                              "\"use\" option.")
    if use == "dnf5":
        use = "dnf"
    if use not in MANAGERS:
        raise ModuleError(f"package: this host's package manager is {use!r}; this tool runs apt (Debian/Ubuntu) and "
                          "dnf (Fedora/RHEL) only: install the packages with the command module there")
    return use


def run(args: dict, ctx: Context) -> dict:
    chosen = manager(args["use"])
    given = {k: v for k, v in args.items() if v is not None and k != "use"}
    spec, task = MANAGERS[chosen]
    return task(check_args(spec, given, chosen), ctx)


if __name__ == "__main__":
    main(ARGS, run)
