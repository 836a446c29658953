"""Installers for Python environments on the host: pip inside the environment, or uv.

Find or bootstrap uv, build install and uninstall command lines alike for both, and turn an
installer's failure output into one paragraph that names the package and the fix.
Standard library only.
"""

from __future__ import annotations

import os
import re
import shutil
import urllib.error
import urllib.request
from collections.abc import Iterable

from dflash_host.pyenv import run_cmd


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
