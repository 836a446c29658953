"""The apt task (library/apt.py, and library/package.py on a Debian-family host): Ansible's steps, results and
messages, run through apt-get, apt-cache, apt-mark and dpkg-query (dflash_host/host/apt_query.py) where Ansible
uses python3-apt.

In Ansible's order: `clean`; the cache (`update_cache`, or lists older than `cache_valid_time`: `apt-get update`,
tried `update_cache_retries` times with a growing pause; alone, it answers cache_updated and cache_update_time);
`upgrade` (apt-get upgrade --with-new-pkgs, or dist-upgrade for full/dist: Ansible's force_apt_get path, never
aptitude); `deb` (a .deb on the host, installed by apt-get with its dependencies unless the same version is in);
then the packages: `*` with latest upgrades all, wildcards expand over apt's names, `name=version` (a glob) and
`name>=version` pick a version, a virtual package provided by one installed package counts as that one;
present/latest install what is missing or older (then apt-mark manual), absent removes what is installed (and,
with purge, what left files). With nothing named, autoremove and autoclean run alone. Check mode runs the same
apt-get with --simulate and says changed where it would run it. state build-dep and fixed are refused.
"""

from __future__ import annotations

import fnmatch
import os
import re
import secrets
import shutil
import tempfile
import time
from contextlib import contextmanager

from dflash_host.host import apt_query
from dflash_host.module import ModuleError

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only
    from collections.abc import Iterator

    from dflash_host.module import Context

APT_GET_ZERO = "\n0 upgraded, 0 newly installed, 0 to remove"
CLEANUP_CHANGED = {"autoremove": "The following packages will be REMOVED", "autoclean": "Del "}
POLICY_RC_D = "/usr/sbin/policy-rc.d"


class Apt:
    """The task's settings every apt-get call shares: dpkg's options, the lock deadline, check and diff."""

    def __init__(self, args: dict, ctx: Context) -> None:
        self.args, self.ctx = args, ctx
        self.deadline = time.time() + max(0, args["lock_timeout"])
        self.dpkg = [w for opt in args["dpkg_options"].split(",") if opt.strip()
                     for w in ("-o", f"Dpkg::Options::=--{opt.strip()}")]
        self.dpkg += ["-o", f"DPkg::Lock::Timeout={args['lock_timeout']}"]
        self.cache_updated, self.cache_update_time = False, 0  # update_cache's answer (set before any package step)

    def apt_get(self, argv: list) -> tuple[int, str, str]:
        rc, out, err = apt_query.run(["apt-get", *argv], self.deadline, apt_query.CHANGE_TIMEOUT_S)
        if rc != 0 and apt_query.lock_failed(err) and "are you root" not in err:
            raise ModuleError(f"Failed to lock apt for exclusive operation: {err.strip()}", rc=rc, stdout=out,
                              stderr=err)
        return rc, out, err

    def flags(self, *names: tuple[str, str]) -> list[str]:
        return [flag for option, flag in names if self.args[option]]

    def simulate(self) -> list[str]:
        return ["--simulate"] if self.ctx.check else []

    def diff(self, out: str) -> dict:
        return prepared(out) if self.ctx.diff else {}


def prepared(out: str) -> dict:
    """apt-get's plan (between 'Reading state information...' and 'N upgraded ...'): Ansible's diff."""
    lines = out.splitlines()
    start = lines.index("Reading state information...") if "Reading state information..." in lines else -1
    end = next((i for i, line in enumerate(lines) if re.match(r"[0-9]+ (packages )?upgraded", line)), len(lines))
    return {"prepared": "\n".join(lines[start + 1:end + 1])}


def output(out: str, err: str) -> dict:
    """stdout and stderr, with their lines as Ansible's controller adds them."""
    return {"stdout": out, "stderr": err, "stdout_lines": out.splitlines(), "stderr_lines": err.splitlines()}


def split_spec(spec: str) -> tuple[str, str | None, str | None]:
    parts = re.split(r"(>?=)", spec, maxsplit=1)
    return (parts[0], parts[1], parts[2]) if len(parts) > 1 else (spec, None, None)


def package_list(names: list | None) -> list[str]:
    """name as Ansible's list type reads it: a string split at commas."""
    out: list[str] = []
    for item in names or []:
        if not isinstance(item, str):
            raise ModuleError(f"Invalid type for package name, expected string but got {type(item)}")
        out.extend(item.split(","))
    return out


def expand(specs: list[str], apt: Apt) -> list[str]:
    """Specs with wildcard names (* ? [ ] !) replaced by apt's matching names (native ones unless NAME:ARCH)."""
    out: list[str] = []
    names: list[str] | None = None
    for spec in specs:
        name = split_spec(spec)[0]
        if not set("*?[]!") & set(name):
            out.append(spec)
            continue
        names = apt_query.package_names(apt.deadline) if names is None else names
        pool = names if ":" in name else [n for n in names if ":" not in n]
        matches = fnmatch.filter(pool, name)
        if not matches:
            raise ModuleError(f"No package(s) matching '{name}' available")
        out.extend(matches)
    return out


def best_version(pol: apt_query.Policy, cmp: str | None, version: str | None) -> str | None:
    """The version apt would install: a `=` glob's highest match (it overrides pins, as `apt-get install
    name=version`), else the policy's candidate (default_release counted)."""
    if cmp == "=" and version is not None:
        best: str | None = None
        for v in pol.versions:
            if fnmatch.fnmatch(v, version) and (best is None or apt_query.version_cmp(v, best) > 0):
                best = v
        return best
    return pol.candidate


def status(name: str, cmp: str | None, version: str | None, apt: Apt, installing: bool) -> tuple:
    """(installed, the installed one matches the spec, the version to install (True: let apt pick), files left)."""
    pol = apt_query.policy(name, apt.args["default_release"], apt.deadline)
    installed, current, has_files = apt_query.dpkg_state(name, apt.deadline)
    if not pol.versions:  # apt has no version of this name: virtual, or unknown
        if not installing:
            return False, False, None, False
        provided_by = apt_query.providers(name, apt.deadline)
        if not provided_by:
            raise ModuleError(f"No package matching '{name}' is available")
        if len(provided_by) == 1:
            found = status(provided_by[0], cmp, version, apt, True)
            if found[0]:
                return found
        return False, False, True, False
    best = best_version(pol, cmp, version)
    if not installed or current is None:
        return False, False, best, has_files
    if cmp == "=" and version is not None:
        return True, fnmatch.fnmatch(current, version), (
            best if best and best != current and fnmatch.fnmatch(best, version) else None), has_files
    if cmp == ">=" and version is not None:
        return True, apt_query.version_cmp(current, version) >= 0, (
            best if best and best != current and apt_query.version_cmp(best, version) >= 0 else None), has_files
    return True, True, (best if best and best != current else None), has_files


def to_install(specs: list[str], apt: Apt, upgrade: bool) -> tuple[list[str], list[str]]:
    """(the apt-get install arguments, every package name asked)."""
    only_upgrade = apt.args["only_upgrade"]
    argv, names = [], []
    for spec in specs:
        name, cmp, version = split_spec(spec)
        names.append(name)
        installed, matches, installable, _files = status(name, cmp, version, apt, True)
        if not installed and only_upgrade:
            continue
        if not matches and not installable:
            raise ModuleError(f"no available installation candidate for {spec}")
        if installable and ((not installed and not only_upgrade) or upgrade or not matches):
            argv.append(f"{name}={installable}" if installable is not True else (f"{name}={version}" if version
                                                                                   else name))
        elif matches and installable and cmp == "=":
            argv.append(f"{name}={version}")
    return argv, names


def install(specs: list[str], apt: Apt, upgrade: bool) -> dict:
    args = apt.args
    argv, names = to_install(expand(specs, apt), apt, upgrade)
    result: dict = {"changed": False}
    failure = None
    if argv:
        cmd = ["-y", *apt.dpkg, *apt.flags(("only_upgrade", "--only-upgrade"), ("force", "--force-yes"),
                                           ("autoremove", "--auto-remove"), ("fail_on_autoremove", "--no-remove")),
               *apt.simulate(), "install", *argv]
        cmd += ["-t", args["default_release"]] if args["default_release"] else []
        if args["install_recommends"] is not None:
            cmd += ["-o", f"APT::Install-Recommends={'yes' if args['install_recommends'] else 'no'}"]
        cmd += apt.flags(("allow_unauthenticated", "--allow-unauthenticated"), ("allow_downgrade", "--allow-downgrades"),
                         ("allow_change_held_packages", "--allow-change-held-packages"))
        rc, out, err = apt.apt_get(cmd)
        result = {"changed": True, **output(out, err), "diff": apt.diff(out)}
        if rc:
            failure = {"msg": f"'apt-get {' '.join(cmd)}' failed: {err}", **output(out, err), "rc": rc}
    if not apt.ctx.check:
        mark_manual(names, apt)
    if failure:
        raise ModuleError(failure.pop("msg"), **failure, **cache_fields(apt))
    return {**result, **cache_fields(apt)}


def mark_manual(names: list[str], apt: Apt) -> None:
    """apt-mark manual: a package asked for by name is no longer removed as an unused dependency."""
    if not names:
        return
    if shutil.which("apt-mark") is None:
        apt.ctx.warn("Could not find apt-mark binary, not marking package(s) as manually installed.")
        return
    rc, out, err = apt_query.run(["apt-mark", "manual", *names], apt.deadline)
    if rc != 0:
        raise ModuleError(f"'apt-mark manual {' '.join(names)}' failed: {err}", stdout=out, stderr=err, rc=rc)


def remove(specs: list[str], apt: Apt) -> dict:
    args = apt.args
    gone = []
    for spec in expand(specs, apt):
        name, cmp, version = split_spec(spec)
        _installed, matches, _best, has_files = status(name, cmp, version, apt, False)
        if matches or (has_files and args["purge"]):
            gone.append(spec)
    if not gone:
        return {"changed": False}
    cmd = ["-q", "-y", *apt.dpkg, *apt.flags(("purge", "--purge"), ("force", "--force-yes"),
                                              ("autoremove", "--auto-remove")),
           *apt.simulate(), *apt.flags(("allow_change_held_packages", "--allow-change-held-packages")), "remove", *gone]
    rc, out, err = apt.apt_get(cmd)
    if rc:
        quoted = " ".join(f"'{p}'" for p in gone)
        raise ModuleError(f"'apt-get remove {quoted}' failed: {err}", stdout=out, stderr=err, rc=rc)
    return {"changed": True, **output(out, err), "diff": apt.diff(out)}


def cleanup(operation: str, apt: Apt) -> dict:
    cmd = ["-y", *apt.dpkg, *apt.flags(("purge", "--purge"), ("force", "--force-yes")), operation, *apt.simulate()]
    rc, out, err = apt.apt_get(cmd)
    if rc:
        raise ModuleError(f"'apt-get {operation}' failed: {err}", stdout=out, stderr=err, rc=rc)
    return {"changed": CLEANUP_CHANGED[operation] in out, **output(out, err), "diff": apt.diff(out)}


def upgrade(mode: str, apt: Apt) -> dict:
    args = apt.args
    command = ["dist-upgrade"] if mode in ("dist", "full") else ["upgrade", "--with-new-pkgs"]
    command += apt.flags(("autoremove", "--auto-remove"))
    cmd = ["-y", *apt.dpkg, *apt.flags(("force", "--force-yes"), ("fail_on_autoremove", "--no-remove"),
                                       ("allow_unauthenticated", "--allow-unauthenticated"),
                                       ("allow_downgrade", "--allow-downgrades")), *apt.simulate(), *command]
    cmd += ["-t", args["default_release"]] if args["default_release"] else []
    rc, out, err = apt.apt_get(cmd)
    if rc:
        raise ModuleError(f"'apt-get {' '.join(command)}' failed: {err}", stdout=out, rc=rc)
    if APT_GET_ZERO in out:
        return {"changed": False, "msg": out, **output(out, err)}
    return {"changed": True, "msg": out, **output(out, err), "diff": apt.diff(out)}


def install_debs(apt: Apt) -> dict:
    """`deb`: each .deb whose version is not the installed one, installed by apt-get (which fetches its
    dependencies); the same version installed: nothing."""
    args = apt.args
    if args["state"] != "present":
        raise ModuleError("deb only supports state=present")
    if "://" in args["deb"]:
        raise ModuleError(f"apt: deb {args['deb']!r} is a URL; this tool installs a .deb that is on the host: "
                          "download it first with get_url (dest: /tmp/x.deb) and give that path")
    debs = []
    for path in args["deb"].split(","):
        path = os.path.abspath(os.path.expanduser(path.strip()))
        if not os.path.isfile(path):
            raise ModuleError(f"Unable to install package: {path} is not a file on the host")
        name, version = apt_query.deb_field(path, "Package", apt.deadline), apt_query.deb_field(path, "Version", apt.deadline)
        installed, current, _files = apt_query.dpkg_state(name, apt.deadline)
        if installed and current is not None and apt_query.version_cmp(current, version) == 0:
            continue
        debs.append(path)
    if not debs:
        return {"changed": False, **output("", ""), "diff": ""}
    cmd = ["-y", *apt.dpkg, *apt.flags(("force", "--force-yes"), ("fail_on_autoremove", "--no-remove"),
                                       ("allow_unauthenticated", "--allow-unauthenticated"),
                                       ("allow_downgrade", "--allow-downgrades"),
                                       ("allow_change_held_packages", "--allow-change-held-packages")),
           *apt.simulate(), "install", *debs]
    if args["install_recommends"] is not None:
        cmd += ["-o", f"APT::Install-Recommends={'yes' if args['install_recommends'] else 'no'}"]
    rc, out, err = apt.apt_get(cmd)
    if rc:
        raise ModuleError(f"apt-get install {' '.join(debs)} failed", stdout=out, stderr=err, rc=rc)
    return {"changed": True, **output(out, err), "diff": prepared(out)}


def cache_fields(apt: Apt) -> dict:
    return {"cache_updated": apt.cache_updated, "cache_update_time": apt.cache_update_time}


def update_cache(apt: Apt) -> None:
    """apt-get update when asked (update_cache) and the lists are older than cache_valid_time; sets the task's
    cache_updated (check mode: it would update) and cache_update_time."""
    args, ctx = apt.args, apt.ctx
    mtime = apt_query.cache_mtime()
    apt.cache_updated, apt.cache_update_time = False, int(mtime)
    if not (args["update_cache"] or args["cache_valid_time"]) or mtime + args["cache_valid_time"] >= time.time():
        return
    error = ""
    for attempt in range(args["update_cache_retries"]):
        if ctx.check:
            break
        rc, out, err = apt.apt_get(["update", "-q"])
        fetch_failed = "Failed to fetch" in err or "Some index files failed to download" in err
        if rc == 0 and not fetch_failed:
            break
        error = (err.strip() or out.strip() or f"apt-get update exited {rc}")
        ctx.warn(f"Failed to update cache after {attempt + 1} retries due to {error}, retrying")
        jitter = secrets.randbelow(1000) / 1000.0
        delay = min(2 ** attempt + jitter, args["update_cache_retry_max_delay"] + jitter)
        time.sleep(delay)
        ctx.warn(f"Sleeping for {int(round(delay))} seconds, before attempting to refresh the cache again")
    else:
        raise ModuleError(f"Failed to update apt cache after {args['update_cache_retries']} retries: "
                          f"{error or 'unknown reason'}")
    after = int(apt_query.cache_mtime())
    apt.cache_updated = ctx.check or after != apt.cache_update_time
    apt.cache_update_time = after


@contextmanager
def policy_rc_d(code: int | None) -> Iterator[None]:
    """/usr/sbin/policy-rc.d answering `code` while the task runs (101: packages do not start their services);
    a file there before is put back after."""
    if code is None:
        yield
        return
    backup = tempfile.mkdtemp(prefix="dfp-policy-rc-d") if os.path.exists(POLICY_RC_D) else None
    if backup:
        shutil.move(POLICY_RC_D, backup)
    try:
        with open(POLICY_RC_D, "w") as fh:
            fh.write(f"#!/bin/sh\nexit {int(code)}\n")
        os.chmod(POLICY_RC_D, 0o755)  # noqa: S103 - policy-rc.d is a program invoke-rc.d runs
        yield
    finally:
        if backup:
            shutil.move(os.path.join(backup, "policy-rc.d"), POLICY_RC_D)
            os.rmdir(backup)
        elif os.path.exists(POLICY_RC_D):
            os.remove(POLICY_RC_D)


def check_args(args: dict) -> None:
    given = [k for k in ("deb", "name", "upgrade") if args[k] is not None]
    if len(given) > 1:
        raise ModuleError("parameters are mutually exclusive: deb|package|upgrade")
    if args["state"] in ("build-dep", "fixed"):
        raise ModuleError(f"apt: state {args['state']} is not supported by this tool (it runs apt-get install, "
                          f"remove and upgrade only); run `apt-get {args['state'].replace('fixed', '-f install')}` "
                          "with the command module instead")


def run(args: dict, ctx: Context) -> dict:
    check_args(args)
    apt = Apt(args, ctx)
    with policy_rc_d(args["policy_rc_d"]):
        return steps(apt)


def clean(apt: Apt) -> dict:
    rc, out, err = apt.apt_get(["clean"])
    if rc or err:
        raise ModuleError("apt-get clean failed" + (f": {err}" if err and not rc else ""), stdout=out, rc=rc)
    return {"changed": True, "msg": out, **output(out, err), "diff": apt.diff(out)}


def steps(apt: Apt) -> dict:
    args = apt.args
    mode = None if args["upgrade"] in (None, "no") else args["upgrade"]
    if args["clean"]:
        cleaned = clean(apt)
        if not args["name"] and mode is None and not args["deb"]:
            return cleaned
    update_cache(apt)
    if (args["update_cache"] or args["cache_valid_time"]) and not args["name"] and mode is None and not args["deb"]:
        return {"changed": apt.cache_updated, **cache_fields(apt)}
    if mode is not None:
        return upgrade(mode, apt)
    if args["deb"]:
        return install_debs(apt)
    asked = package_list(args["name"])
    packages = [p.strip() for p in asked if p != "*"]
    if args["state"] == "latest" and "*" in asked:
        if packages:
            raise ModuleError("unable to install additional packages when upgrading all installed packages")
        return upgrade("yes", apt)
    for spec in packages:
        if spec.count("=") > 1:
            raise ModuleError(f"invalid package spec: {spec}")
    if not packages:
        for operation in ("autoclean", "autoremove"):
            if args[operation]:
                return cleanup(operation, apt)
    if args["state"] == "absent":
        return remove(packages, apt)
    return install(packages, apt, upgrade=args["state"] == "latest")
