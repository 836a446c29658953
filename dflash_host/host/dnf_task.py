"""The dnf task (library/dnf.py, and library/package.py on a Fedora/RHEL-family host), run through the dnf and
rpm programs (Ansible's uses python3-dnf).

What is installed comes from `rpm -q` (a name, NAME-VERSION, or what provides a capability or a path); present
installs what is missing, latest also upgrades what `dnf check-update` says is older (`*`: every package),
absent removes what is installed; update_cache refreshes the metadata first (alone: "Cache updated"). Check mode
decides from those queries and runs nothing. Results as Ansible's: msg ("Nothing to do", "Check mode: ..."),
results (dnf's own lines), rc, changed. A host without dnf is refused with a clear message. Standard library only.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time

from dflash_host.module import ModuleError

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only
    from dflash_host.module import Context

TIMEOUT_S = 3600.0  # an install may download a lot; a query rarely takes a minute
QUERY_TIMEOUT_S = 300.0
CHECK_MSG = "Check mode: No changes made, but would have if not in check mode"
LOCK_WORDS = ("Waiting for process with pid", "another copy is running", "Failed to obtain the transaction lock")


def dnf_binary() -> str:
    """The dnf program (dnf, dnf-3 or dnf5); a host without one is refused, naming what to use instead."""
    for name in ("dnf", "dnf-3", "dnf5"):
        found = shutil.which(name)
        if found:
            return found
    raise ModuleError("dnf: this host has no dnf (no dnf, dnf-3 or dnf5 on PATH): it is not a Fedora/RHEL-family "
                      "host. Use apt on Debian/Ubuntu hosts, or package, which picks the host's own manager")


def call(argv: list, timeout: float, deadline: float) -> tuple[int, str, str]:
    """(rc, stdout, stderr); dnf's lock held by another process is waited for until `deadline`."""
    env = dict(os.environ, LANG="C.UTF-8", LC_ALL="C.UTF-8")
    while True:
        try:
            res = subprocess.run(argv, capture_output=True, text=True, errors="replace", timeout=timeout, env=env,
                                 stdin=subprocess.DEVNULL, check=False)
        except FileNotFoundError:
            raise ModuleError(f"dnf: {argv[0]} is not installed on this host") from None
        except subprocess.TimeoutExpired:
            raise ModuleError(f"'{' '.join(argv)}' did not finish within {timeout:g} s; look for a hung download "
                              "on the host (ps -ef | grep dnf)") from None
        locked = res.returncode != 0 and any(w in res.stdout + res.stderr for w in LOCK_WORDS)
        if not locked or time.time() >= deadline:
            return res.returncode, res.stdout, res.stderr
        time.sleep(2.0)


def installed(spec: str, deadline: float) -> bool:
    """Whether rpm knows spec installed: as a name or NAME-VERSION, else as a capability or path it provides."""
    if spec.startswith("@"):
        return False  # groups and modules are left to dnf: never counted as installed
    name = spec.split()[0] if " " in spec else spec
    if call(["rpm", "-q", "--", name], QUERY_TIMEOUT_S, deadline)[0] == 0:
        return True
    return call(["rpm", "-q", "--whatprovides", "--", name], QUERY_TIMEOUT_S, deadline)[0] == 0


class Dnf:
    def __init__(self, args: dict, ctx: Context) -> None:
        self.args, self.ctx = args, ctx
        self.bin = dnf_binary()
        self.deadline = time.time() + max(0, args["lock_timeout"])

    def options(self) -> list[str]:
        a = self.args
        out = [f"--enablerepo={r}" for r in a["enablerepo"]] + [f"--disablerepo={r}" for r in a["disablerepo"]]
        out += [f"--exclude={e}" for e in a["exclude"]]
        out += ["--nogpgcheck"] if a["disable_gpg_check"] else []
        out += [f"--setopt=install_weak_deps={a['install_weak_deps']}"]
        return out

    def run(self, *argv: str) -> tuple[int, str, str]:
        return call([self.bin, "-y", *self.options(), *argv], TIMEOUT_S, self.deadline)

    def outdated(self, names: list[str]) -> bool:
        rc, out, err = call([self.bin, "-q", *self.options(), "check-update", *(["--", *names] if names else [])],
                            QUERY_TIMEOUT_S, self.deadline)
        if rc not in (0, 100):
            raise ModuleError(f"dnf check-update failed: {(err or out).strip()}", rc=rc)
        return rc == 100


def transaction_lines(out: str) -> list[str]:
    """dnf's summary of what it did ("Installed: NAME-VERSION.ARCH", ...), as Ansible's results list it."""
    results: list[str] = []
    section: str | None = None
    for line in out.splitlines():
        head = line.strip().rstrip(":")
        if line and not line.startswith(" ") and head in ("Installed", "Upgraded", "Removed", "Downgraded",
                                                          "Reinstalled"):
            section = head
            continue
        if section and line.startswith(" ") and line.strip():
            results.extend(f"{section}: {word}" for word in line.split())
        elif not line.strip() or not line.startswith(" "):
            section = None
    return results


def finish(dnf: Dnf, verb: str, specs: list[str]) -> dict:
    if not specs:
        return {"changed": False, "msg": "Nothing to do", "rc": 0, "results": []}
    if dnf.ctx.check:
        return {"changed": True, "msg": CHECK_MSG, "rc": 0, "results": [f"{verb}: {s}" for s in specs]}
    argv = ["autoremove" if verb == "remove" and dnf.args["autoremove"] else verb, "--", *specs]
    rc, out, err = dnf.run(*argv)
    if rc != 0:
        raise ModuleError(f"Failed to {verb} packages: {(err or out).strip()}", rc=rc, results=[], failures=[err])
    return {"changed": True, "msg": "", "rc": 0, "results": transaction_lines(out)}


def run(args: dict, ctx: Context) -> dict:
    dnf = Dnf(args, ctx)
    names = [n.strip() for item in args["name"] or [] for n in str(item).split(",") if n.strip()]
    state = {"installed": "present", "removed": "absent", None: "present"}.get(args["state"], args["state"])
    if args["update_cache"] and not ctx.check:
        rc, out, err = dnf.run("makecache", "--refresh")
        if rc != 0:
            raise ModuleError(f"Failed to synchronize repodata: {(err or out).strip()}", rc=rc)
    if not names:
        if args["update_cache"]:
            return {"changed": False, "msg": "Cache updated", "rc": 0, "results": []}
        if state == "absent" and args["autoremove"] and not ctx.check:
            rc, out, err = dnf.run("autoremove")
            if rc != 0:
                raise ModuleError(f"Failed to autoremove packages: {(err or out).strip()}", rc=rc)
            lines = transaction_lines(out)
            return {"changed": bool(lines), "msg": "" if lines else "Nothing to do", "rc": 0, "results": lines}
        return {"changed": False, "msg": "Nothing to do", "rc": 0, "results": []}
    if state == "absent":
        if "*" in names:
            raise ModuleError("Cannot remove all packages (name '*'): name the packages to remove")
        return finish(dnf, "remove", [n for n in names if installed(n, dnf.deadline)])
    if state == "latest" and names == ["*"]:
        return finish(dnf, "upgrade", ["*"] if dnf.outdated([]) else [])
    missing = [n for n in names if not installed(n, dnf.deadline)]
    if state == "latest":
        present = [n for n in names if n not in missing]
        upgrades = [n for n in present if dnf.outdated([n])]
        result = finish(dnf, "upgrade", upgrades) if upgrades else {"changed": False, "results": []}
        if missing and not args["update_only"]:
            installed_result = finish(dnf, "install", missing)
            result = {**installed_result, "results": result["results"] + installed_result["results"]}
        return result if result["changed"] else {"changed": False, "msg": "Nothing to do", "rc": 0, "results": []}
    return finish(dnf, "install", missing)
