"""Argument entries that several task modules share, written once: single entries and groups of entries.

A module's ARGS entry `{"include": NAME, ...}` is SHARED[NAME] with the entry's own keys over it (a module
makes it required, or says in its own help what it does with it). A module's ARGS key `"_groups": (NAME, ...)`
stands, where it is written, for every entry of each group GROUPS[NAME] (as Ansible's FILE_COMMON_ARGUMENTS: the
command options command and shell take, the file attributes file, copy and lineinfile take); an entry of the
group that the module writes itself keeps its place and has its own keys over the group's (copy says in its own
help what its mode takes). ARGS stays a literal: both sides resolve it from these literal tables, the engine
after reading a module's ARGS without importing it (engine/playbook/modulespec.py), the host in check_args
(dflash_host/module.py), both through resolve_entries. Standard library only.
"""

from __future__ import annotations

GROUPS_KEY = "_groups"  # the ARGS key naming a module's groups; never an argument

SHARED: dict[str, dict] = {
    "vllm_pidfile": {"type": "path", "default": None, "var": "vllm_pidfile",
                     "help": "the vLLM server's pidfile; its launch files sit beside it (NAME.launch.json, NAME.env)"},
    "dfp_root": {"type": "path", "default": None, "var": "dfp_root",
                 "help": "dfp_root: the files this module writes or reads lie inside it"},
    "nvidia_smi": {"type": "str", "default": None, "var": "nvidia_smi",
                   "help": "the nvidia-smi command; none: nvidia-smi from PATH"},
    "hf_home": {"type": "path", "default": None, "var": "hf_home",
                "help": "the Hugging Face cache the models role fills; a Hub id is looked up there first"},
    "target_revision": {"type": "str", "default": None, "var": "target_revision",
                        "help": "the target's commit, branch or tag (none: main)"},
    "drafter_revision": {"type": "str", "default": None, "var": "drafter_revision",
                         "help": "the drafter's commit, branch or tag (none: main)"},
    "hf_token_file": {"type": "path", "default": None, "var": "hf_token_file",
                      "help": "a file on the host holding the Hugging Face token"},
    "find_links": {"type": "list", "default": None, "var": "find_links",
                   "help": "folders on the host or URLs holding wheels (e.g. /opt/wheels for torch==2.13.0+cpu)"},
    "fallback_index_urls": {"type": "list", "default": None, "var": "fallback_index_urls",
                            "help": "more package indexes, asked where no find_links folder exists on the host or "
                                    "none has a wheel the install needs (e.g. PyTorch's CPU index)"},
}


# Groups of entries (ARGS "_groups": (NAME, ...)), each entry under the argument name the modules take.
GROUPS: dict[str, dict[str, dict]] = {
    # command and shell (library/command.py, library/shell.py): ansible.builtin.command's options and ours
    "command_options": {
        "chdir": {"type": "path", "default": None,
                  "help": "working folder (relative creates/removes are taken from it)"},
        "creates": {"type": "path", "default": None,
                    "help": "a path or glob pattern: when it matches, the command is not run (changed false, rc 0)"},
        "removes": {"type": "path", "default": None,
                    "help": "a path or glob pattern: when it matches nothing, the command is not run (changed false, "
                            "rc 0); checked after creates"},
        "stdin": {"type": "str", "default": None,
                  "help": "text fed to the program's standard input (else it reads from /dev/null)"},
        "stdin_add_newline": {"type": "bool", "default": True, "help": "add a newline to a non-empty stdin"},
        "strip_empty_ends": {"type": "bool", "default": True,
                             "help": "strip the line ends at the end of stdout and stderr (as Ansible does)"},
        "env": {"type": "dict", "default": None, "help": "variables added to the inherited environment"},
        "timeout_s": {"type": "float", "default": None,
                      "help": "stop the program's whole process group after this many seconds; a failure"},
        "expect_rc": {"type": "list", "default": [0], "help": "return codes that count as success"},
        "check_safe": {"type": "bool", "default": False, "help": "the command only reads: run it in check mode too"},
    },
    # systemd_service and its alias systemd (library/systemd_service.py, library/systemd.py): Ansible's options
    "systemd_options": {
        "name": {"type": "str", "default": None, "help": "the unit (a name without a suffix is a .service)"},
        "service": {"type": "str", "default": None, "alias_of": "name", "help": "alias of name"},
        "unit": {"type": "str", "default": None, "alias_of": "name", "help": "alias of name"},
        "state": {"type": "str", "default": None, "choices": ["reloaded", "restarted", "started", "stopped"],
                  "help": "started/stopped: only when it is not so already; restarted/reloaded: always"},
        "enabled": {"type": "bool", "default": None, "help": "start it at boot (systemctl enable/disable)"},
        "force": {"type": "bool", "default": None, "help": "systemctl --force (enable over conflicting links)"},
        "masked": {"type": "bool", "default": None, "help": "masked: it cannot be started (systemctl mask/unmask)"},
        "daemon_reload": {"type": "bool", "default": None,
                          "help": "systemctl daemon-reload first (reads changed unit files); not in check mode (none: false)"},
        "daemon-reload": {"type": "bool", "default": None, "alias_of": "daemon_reload", "help": "alias of daemon_reload"},
        "daemon_reexec": {"type": "bool", "default": None, "help": "systemctl daemon-reexec first; not in check mode"},
        "daemon-reexec": {"type": "bool", "default": None, "alias_of": "daemon_reexec", "help": "alias of daemon_reexec"},
        "scope": {"type": "str", "default": "system", "choices": ["system", "user", "global"],
                  "help": "which manager: the system's, the calling user's (--user), or global (--global)"},
        "no_block": {"type": "bool", "default": False, "help": "systemctl --no-block: do not wait for the job"},
    },
    # apt (library/apt.py; package on a Debian-family host): Ansible's options (dflash_host/host/apt_task.py)
    "apt_options": {
        "name": {"type": "list", "default": None,
                 "help": "packages: NAME, NAME=VERSION (a glob such as 1.2*), NAME>=VERSION, wildcards (nginx*); "
                         "* with state latest upgrades every package"},
        "package": {"type": "list", "default": None, "alias_of": "name", "help": "alias of name"},
        "pkg": {"type": "list", "default": None, "alias_of": "name", "help": "alias of name"},
        "state": {"type": "str", "default": "present", "choices": ["absent", "build-dep", "fixed", "latest", "present"],
                  "help": "present: installed; latest: the newest; absent: removed (build-dep and fixed are refused)"},
        "update_cache": {"type": "bool", "default": None, "help": "apt-get update first (alone: only that)"},
        "update-cache": {"type": "bool", "default": None, "alias_of": "update_cache", "help": "alias of update_cache"},
        "update_cache_retries": {"type": "int", "default": 5, "help": "tries of apt-get update before failing"},
        "update_cache_retry_max_delay": {"type": "int", "default": 12,
                                         "help": "the longest pause (seconds) between those tries"},
        "cache_valid_time": {"type": "int", "default": 0,
                             "help": "update only when apt's lists are older than this many seconds"},
        "purge": {"type": "bool", "default": False, "help": "with absent: remove the configuration files too"},
        "deb": {"type": "path", "default": None,
                "help": "a .deb file on the host (several: comma-separated), installed with its dependencies; a "
                        "URL is refused (get_url it first)"},
        "default_release": {"type": "str", "default": None, "help": "apt-get -t: the release packages come from"},
        "default-release": {"type": "str", "default": None, "alias_of": "default_release",
                            "help": "alias of default_release"},
        "install_recommends": {"type": "bool", "default": None,
                               "help": "install recommended packages too (none: the host's apt setting)"},
        "install-recommends": {"type": "bool", "default": None, "alias_of": "install_recommends",
                               "help": "alias of install_recommends"},
        "force": {"type": "bool", "default": False, "help": "apt-get --force-yes (dangerous: unsigned, downgrades)"},
        "upgrade": {"type": "str", "default": None, "choices": ["dist", "full", "no", "safe", "yes"],
                    "help": "upgrade installed packages: yes/safe (apt-get upgrade --with-new-pkgs), full/dist "
                            "(apt-get dist-upgrade); none or no: do not"},
        "dpkg_options": {"type": "str", "default": "force-confdef,force-confold",
                         "help": "dpkg options, comma-separated, without their leading --"},
        "autoremove": {"type": "bool", "default": False, "help": "remove packages no longer needed"},
        "autoclean": {"type": "bool", "default": False, "help": "drop downloaded .debs that can no longer be fetched"},
        "fail_on_autoremove": {"type": "bool", "default": False,
                               "help": "apt-get --no-remove: fail rather than remove a package"},
        "policy_rc_d": {"type": "int", "default": None,
                        "help": "/usr/sbin/policy-rc.d's exit code while the task runs (101: no service starts)"},
        "only_upgrade": {"type": "bool", "default": False, "help": "upgrade only packages already installed"},
        "force_apt_get": {"type": "bool", "default": False, "help": "accepted: this tool always uses apt-get"},
        "clean": {"type": "bool", "default": False, "help": "apt-get clean first (alone: only that)"},
        "allow_unauthenticated": {"type": "bool", "default": False,
                                  "help": "apt-get --allow-unauthenticated"},
        "allow-unauthenticated": {"type": "bool", "default": None, "alias_of": "allow_unauthenticated",
                                  "help": "alias of allow_unauthenticated"},
        "allow_downgrade": {"type": "bool", "default": False, "help": "apt-get --allow-downgrades"},
        "allow-downgrade": {"type": "bool", "default": None, "alias_of": "allow_downgrade",
                            "help": "alias of allow_downgrade"},
        "allow_downgrades": {"type": "bool", "default": None, "alias_of": "allow_downgrade",
                             "help": "alias of allow_downgrade"},
        "allow-downgrades": {"type": "bool", "default": None, "alias_of": "allow_downgrade",
                             "help": "alias of allow_downgrade"},
        "allow_change_held_packages": {"type": "bool", "default": False,
                                       "help": "apt-get --allow-change-held-packages"},
        "lock_timeout": {"type": "int", "default": 60,
                         "help": "seconds to wait for apt's and dpkg's locks before failing"},
        "auto_install_module_deps": {"type": "bool", "default": True,
                                     "help": "accepted: this tool needs no python3-apt"},
    },
    # dnf (library/dnf.py; package on a Fedora/RHEL-family host): Ansible's options (dflash_host/host/dnf_task.py)
    "dnf_options": {
        "name": {"type": "list", "default": None,
                 "help": "packages: NAME, NAME-VERSION, 'NAME >= VERSION', @group, a path on the host; * with latest: "
                         "every package"},
        "pkg": {"type": "list", "default": None, "alias_of": "name", "help": "alias of name"},
        "state": {"type": "str", "default": None, "choices": ["absent", "installed", "latest", "present", "removed"],
                  "help": "present/installed (none: present), latest, absent/removed"},
        "update_cache": {"type": "bool", "default": False, "help": "refresh the repositories' metadata first"},
        "expire-cache": {"type": "bool", "default": None, "alias_of": "update_cache", "help": "alias of update_cache"},
        "enablerepo": {"type": "list", "default": [], "help": "repositories to enable for this task (globs)"},
        "disablerepo": {"type": "list", "default": [], "help": "repositories to disable for this task (globs)"},
        "install_weak_deps": {"type": "bool", "default": True, "help": "install weak dependencies (Recommends)"},
        "autoremove": {"type": "bool", "default": False, "help": "with absent: remove unneeded dependencies too"},
        "disable_gpg_check": {"type": "bool", "default": False, "help": "dnf --nogpgcheck"},
        "exclude": {"type": "list", "default": [], "help": "packages never to install or upgrade (globs)"},
        "update_only": {"type": "bool", "default": False, "help": "with latest: only upgrade, never install"},
        "lock_timeout": {"type": "int", "default": 30, "help": "seconds to wait for dnf's lock"},
    },
    # file, copy, lineinfile: Ansible's file attributes (dflash_host/host/fileattrs.py sets them)
    "file_attributes": {
        "mode": {"type": "raw", "default": None,
                 "help": 'octal string such as "0750" (or the number YAML makes of 0750), or symbolic (u=rwX,g=rX,o=); '
                         "none: an existing path keeps its mode"},
        "owner": {"type": "str", "default": None, "help": "user name or uid"},
        "group": {"type": "str", "default": None, "help": "group name or gid"},
    },
}


# package (library/package.py): every option of apt and dnf, passed on to the one the host uses (none: not given)
GROUPS["package_options"] = {
    entry: {**opts, "default": None, "help": " or ".join(
        m for m, g in (("apt", "apt_options"), ("dnf", "dnf_options")) if entry in GROUPS[g]) + "'s " + entry +
        ", passed on to the host's manager (refused there when it has no such option)"}
    for group in ("apt_options", "dnf_options") for entry, opts in GROUPS[group].items()
    if entry not in ("name", "state") and opts.get("alias_of") != "name"
}

class UnknownInclude(KeyError):
    """An ARGS entry includes a name SHARED does not have (or ARGS names a group GROUPS does not have)."""


class UnknownGroup(UnknownInclude):
    """ARGS "_groups" names a group GROUPS does not have, or is not a tuple of names."""


def _group_entries(names: object) -> dict[str, dict]:
    """The entries of the groups `names` (ARGS "_groups"), in the groups' order."""
    if not isinstance(names, (tuple, list)) or not all(isinstance(n, str) for n in names):
        raise UnknownGroup(f"{GROUPS_KEY} must be a tuple of group names, e.g. {GROUPS_KEY}: (\"file_attributes\",), "
                           f"got {names!r}")
    out: dict[str, dict] = {}
    for group in names:
        entries = GROUPS.get(group)
        if entries is None:
            raise UnknownGroup(f"{GROUPS_KEY} names the group {group!r}, which dflash_host/shared_args.py does not "
                               f"define (it has: {', '.join(sorted(GROUPS))})")
        out.update(entries)
    return out


def _included(name: str, opts: object) -> object:
    """An entry with its include replaced by the shared entry, the entry's own keys over it."""
    if not (isinstance(opts, dict) and "include" in opts):
        return opts
    base = SHARED.get(opts["include"])
    if base is None:
        raise UnknownInclude(f"argument {name!r} includes {opts['include']!r}, which dflash_host/shared_args.py "
                             f"does not define (it has: {', '.join(sorted(SHARED))})")
    return {**base, **{k: v for k, v in opts.items() if k != "include"}}


def resolve_entries(spec: dict) -> dict:
    """ARGS with its groups and includes resolved: each group's entries where "_groups" stands (those the module
    writes itself where it writes them, its keys over the group's), every include replaced by the shared entry."""
    if GROUPS_KEY not in spec and not any(isinstance(opts, dict) and "include" in opts for opts in spec.values()):
        return spec
    grouped = _group_entries(spec.get(GROUPS_KEY, ()))
    out: dict[str, object] = {}
    for name, opts in spec.items():
        if name == GROUPS_KEY:
            out.update((entry, dict(base)) for entry, base in grouped.items() if entry not in spec)
            continue
        opts = _included(name, opts)
        if name in grouped and isinstance(opts, dict):
            opts = {**grouped[name], **opts}
        out[name] = opts
    return out
