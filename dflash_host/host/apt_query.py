"""What the apt task (dflash_host/host/apt_task.py) asks apt and dpkg, through their programs only: apt-get,
apt-cache, apt-mark and dpkg-query (no python3-apt, which a host may lack for the python that runs us).

Every call runs with apt's non-interactive environment (DEBIAN_FRONTEND=noninteractive, the C locale, so that the
words we read are apt's English ones) and a timeout; a call that finds apt's or dpkg's lock held is tried again
until the task's lock deadline, then reported. Debian version numbers are compared here (dpkg's ordering: epoch,
upstream, revision; `~` sorts before everything). Standard library only.
"""

from __future__ import annotations

import os
import re
import subprocess
import time

from dflash_host.module import ModuleError

QUERY_TIMEOUT_S = 300.0  # apt-cache, dpkg-query, apt-mark: they read, they never fetch
CHANGE_TIMEOUT_S = 3600.0  # apt-get install / upgrade / update: downloads can be large (drivers, CUDA)
LOCK_WORDS = ("Could not get lock", "Unable to lock", "Unable to acquire the dpkg frontend lock",
              "is another process using it")
LISTS = "/var/lib/apt/lists"
UPDATE_STAMP = "/var/lib/apt/periodic/update-success-stamp"


def apt_env() -> dict:
    env = dict(os.environ)
    env.update(DEBIAN_FRONTEND="noninteractive", DEBIAN_PRIORITY="critical", LANG="C.UTF-8", LC_ALL="C.UTF-8",
               LC_MESSAGES="C.UTF-8", LC_CTYPE="C.UTF-8", LANGUAGE="C.UTF-8")
    return env


def run(argv: list, deadline: float, timeout: float = QUERY_TIMEOUT_S) -> tuple[int, str, str]:
    """(rc, stdout, stderr) of argv in apt's environment; a held lock waits (every 2 s) until `deadline`."""
    while True:
        try:
            res = subprocess.run(argv, capture_output=True, text=True, errors="replace", timeout=timeout,
                                 env=apt_env(), stdin=subprocess.DEVNULL, check=False)
        except FileNotFoundError:
            raise ModuleError(f"Failed to find required executable \"{argv[0]}\" in paths: "
                              f"{os.environ.get('PATH', '')}; this host has no apt (use dnf or package on other "
                              "hosts)") from None
        except subprocess.TimeoutExpired:
            raise ModuleError(f"'{' '.join(argv)}' did not finish within {timeout:g} s; look for a hung download "
                              "or a dpkg prompt on the host (ps -ef | grep -e apt -e dpkg)") from None
        locked = res.returncode != 0 and any(w in res.stderr for w in LOCK_WORDS)
        if not locked or time.time() >= deadline:
            return res.returncode, res.stdout, res.stderr
        time.sleep(2.0)


def lock_failed(err: str) -> bool:
    return any(w in err for w in LOCK_WORDS)


def cache_mtime() -> float:
    """When apt's lists were last fetched: the update-success stamp where the host keeps one, else the lists
    folder's mtime (0: neither), as Ansible reads it."""
    for path in (UPDATE_STAMP, LISTS):
        if os.path.exists(path):
            return os.stat(path).st_mtime
    return 0.0


# -- Debian version numbers (dpkg's order) ---------------------------------------------------------------------

def _order(ch: str) -> int:
    if ch == "~":
        return -1
    if ch.isdigit() or not ch:
        return 0
    if ch.isalpha():
        return ord(ch)
    return ord(ch) + 256


def _part_cmp(a: str, b: str) -> int:
    """dpkg's comparison of one upstream or revision part: alternating non-digit runs (by _order) and numbers."""
    i = j = 0
    while i < len(a) or j < len(b):
        while (i < len(a) and not a[i].isdigit()) or (j < len(b) and not b[j].isdigit()):
            ca = a[i] if i < len(a) and not a[i].isdigit() else ""
            cb = b[j] if j < len(b) and not b[j].isdigit() else ""
            if _order(ca) != _order(cb):
                return -1 if _order(ca) < _order(cb) else 1
            i += bool(ca)
            j += bool(cb)
        na = re.match(r"\d*", a[i:]).group()  # type: ignore[union-attr]
        nb = re.match(r"\d*", b[j:]).group()  # type: ignore[union-attr]
        i, j = i + len(na), j + len(nb)
        if int(na or 0) != int(nb or 0):
            return -1 if int(na or 0) < int(nb or 0) else 1
    return 0


def _split(version: str) -> tuple[int, str, str]:
    epoch, _, rest = version.partition(":") if ":" in version else ("0", "", version)
    upstream, _, revision = rest.rpartition("-") if "-" in rest else (rest, "", "")
    return (int(epoch) if epoch.isdigit() else 0), upstream, revision


def version_cmp(a: str, b: str) -> int:
    """-1, 0 or 1 as Debian version a sorts before, with or after b."""
    ea, ua, ra = _split(a)
    eb, ub, rb = _split(b)
    if ea != eb:
        return -1 if ea < eb else 1
    return _part_cmp(ua, ub) or _part_cmp(ra, rb)


# -- what dpkg and apt know of a package ---------------------------------------------------------------------

def dpkg_state(name: str, deadline: float) -> tuple[bool, str | None, bool]:
    """(installed, installed version, files left on disk) of a package, from dpkg's database."""
    rc, out, _err = run(["dpkg-query", "-W", "-f", "${db:Status-Abbrev}\t${Version}\n", "--", name], deadline)
    if rc != 0:
        return False, None, False
    installed, version, has_files = False, None, False
    for line in out.splitlines():
        abbrev, _, ver = line.partition("\t")
        if abbrev[1:2] == "i":
            installed, version = True, ver.strip()
        if abbrev[1:2] not in ("n", ""):
            has_files = True
    return installed, version, has_files


class Policy:
    """`apt-cache policy NAME`: the candidate and every version apt knows (the installed one included)."""

    def __init__(self, text: str) -> None:
        self.known = bool(text.strip())
        self.candidate: str | None = None
        self.versions: list[str] = []
        for line in text.splitlines():
            stripped = line.strip()
            if stripped.startswith("Candidate:"):
                value = stripped.split(":", 1)[1].strip()
                self.candidate = None if value == "(none)" else value
                continue
            indent = len(line) - len(line.lstrip())
            fields = stripped.removeprefix("***").split()
            if indent <= 5 and len(fields) == 2 and fields[1].lstrip("-").isdigit() and not fields[0].endswith(":"):
                self.versions.append(fields[0])


def policy(name: str, default_release: str | None, deadline: float) -> Policy:
    argv = ["apt-cache"] + (["-o", f"APT::Default-Release={default_release}"] if default_release else [])
    rc, out, err = run([*argv, "policy", "--", name], deadline)
    if rc != 0:
        raise ModuleError(f"'apt-cache policy {name}' failed: {err.strip()}", rc=rc, stdout=out, stderr=err)
    return Policy(out)


def providers(name: str, deadline: float) -> list[str]:
    """The packages that provide a virtual package (apt-cache showpkg's Reverse Provides), each named once."""
    rc, out, _err = run(["apt-cache", "showpkg", "--", name], deadline)
    if rc != 0 or "Reverse Provides:" not in out:
        return []
    names: list[str] = []
    for line in out.split("Reverse Provides:", 1)[1].splitlines():
        word = line.split(" ", 1)[0].strip()
        if word and word not in names:
            names.append(word)
    return names


def package_names(deadline: float) -> list[str]:
    rc, out, err = run(["apt-cache", "pkgnames"], deadline)
    if rc != 0:
        raise ModuleError(f"'apt-cache pkgnames' failed: {err.strip()}", rc=rc)
    return out.split()


def deb_field(path: str, field: str, deadline: float) -> str:
    rc, out, err = run(["dpkg-deb", "--field", path, field], deadline)
    if rc != 0:
        raise ModuleError(f"dpkg --field {path} {field} failed", stdout=out, stderr=err)
    return out.strip("\n")
