"""Installers for Python environments on the host: pip inside the environment, or uv.

Choose the installer (the one chooser for python_env and flash_attn), find or bootstrap uv, build
install and uninstall command lines alike for both, run them with live progress, and turn an
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

from dflash_host.env.interpreter import DEFAULT_TOOL_DIR, ENV_MARKER, run_cmd
from dflash_host.host.files import read_json
from dflash_host.module import Context, ModuleError

# Installer output lines worth showing live (pip's and uv's own words).
PROGRESS = ("Collecting", "Downloading", "Building", "Installing", "Successfully", "Resolved", "Prepared", "Installed")


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


def choose_installer(args: dict, ctx: Context, env: dict | None = None, build_python: str = "") -> tuple[str, str | None]:
    """('uv', path) or ('pip', None), by args["installer"] (auto, uv, pip) and args["tool_dir"] (where this tool
    installs uv; none: DEFAULT_TOOL_DIR).

    Into an existing environment (`env`: {"prefix", "has_pip"}, as flash_attn probes it), auto takes the
    environment's own pip, else uv (PATH, tool_dir, or the uv that built it, named in its marker): nothing is
    installed there to get an installer. For a new environment (python_env, built from `build_python`), auto
    takes uv, installing it into tool_dir from the package sources when it is missing, else pip.
    """
    tool_dir = os.path.expanduser(args["tool_dir"] or DEFAULT_TOOL_DIR)
    if env is not None:
        return _installer_for_env(args["installer"], tool_dir, env)
    return _installer_for_build(args, tool_dir, ctx, build_python)


def _installer_for_env(want: str, tool_dir: str, env: dict) -> tuple[str, str | None]:
    prefix = env["prefix"]
    if want == "pip" or (want == "auto" and env["has_pip"]):
        if not env["has_pip"]:
            raise ModuleError(
                f"installer pip is asked for, but the environment {prefix} has no pip; "
                f"set installer auto (uses uv) or rebuild the env with installer pip"
            )
        return "pip", None
    built_with = (read_json(os.path.join(prefix, ENV_MARKER)) or {}).get("uv")
    uv = find_uv(tool_dir) or (built_with if isinstance(built_with, str) and os.path.exists(built_with) else None)
    if not uv:
        raise ModuleError(
            f"the environment {prefix} has no pip and uv is not found (PATH, "
            f"{tool_dir}); run the venv role (it installs uv) or put uv on PATH"
        )
    return "uv", uv


def _installer_for_build(args: dict, tool_dir: str, ctx: Context, build_python: str) -> tuple[str, str | None]:
    want = args["installer"]
    if want == "pip":
        return "pip", None
    uv = find_uv(tool_dir)
    if uv:
        return "uv", uv
    wheelhouse = args["wheelhouse"]
    if wheelhouse and not any(n.startswith("uv-") and n.endswith(".whl") for n in os.listdir(wheelhouse)):
        if want == "uv":
            raise ModuleError(
                f"installer uv is asked for, but uv is not on PATH and the wheelhouse {wheelhouse} has no uv "
                f"wheel to install it from; add one (`pip download uv -d WHEELHOUSE`) or set installer pip"
            )
        return "pip", None
    ctx.say(f"installing uv into {tool_dir}")
    src = package_sources(args, wheelhouse)
    uv, why = bootstrap_uv(tool_dir, build_python, src, timeout=600)
    if uv:
        return "uv", uv
    if want == "uv":
        raise ModuleError(f"installer uv is asked for, but it cannot be installed: {why}; put uv on PATH or set installer pip")
    ctx.warn(f"uv could not be installed ({why}); building with pip instead")
    return "pip", None


def run_installer(
    argv: list, args: dict, ctx: Context, what: str, fix_where: str, cwd: str | None = None, pass_fds: Iterable[int] = ()
) -> str:
    """Run an installer command line, its progress lines said live; returns its output.

    args: the module's timeout_s, wheelhouse and index_url. A run past timeout_s is stopped; a failure is a
    ModuleError naming the package and the fix (explain_failure; `what` is the step, `fix_where` the variables
    that set the requirements), with the output's last lines.
    """

    def progress(line: str) -> None:
        if line.lstrip().startswith(PROGRESS):
            ctx.say(line.strip()[:200])

    out = run_cmd(argv, timeout=args["timeout_s"], on_line=progress, cwd=cwd, pass_fds=pass_fds)
    if out.timed_out:
        raise ModuleError(f"{what} took longer than timeout_s={args['timeout_s']} s and was stopped; raise timeout_s")
    if out.rc != 0:
        raise ModuleError(
            explain_failure(out.text, args["wheelhouse"], args["index_url"], what, fix_where),
            output_tail=out.text.strip().splitlines()[-30:],
        )
    return out.text


def is_local_link(link: object) -> bool:
    """A find_links entry that names a folder on the host (not a URL)."""
    return "://" not in str(link)


def present_links(find_links: Iterable[str] | None) -> list:
    """The find_links entries the installer can read: URLs, and folders that exist on this host.

    uv fails at once on a missing --find-links folder (pip only warns), so a folder that is absent on
    this host (e.g. /opt/wheels, found on some machines only) is left out rather than handed on.
    """
    return [link for link in find_links or () if not is_local_link(link) or os.path.isdir(os.path.expanduser(str(link)))]


def package_sources(args: dict, wheelhouse: str | None = None) -> list:
    """Index options for a module's package-source arguments (index_url, extra_index_urls, find_links,
    fallback_index_urls, wheelhouse); wheelhouse overrides args' own when given."""
    return source_args(
        args.get("index_url"), args.get("extra_index_urls"), args.get("find_links"),
        wheelhouse if wheelhouse is not None else args.get("wheelhouse"), args.get("fallback_index_urls"),
    )


def source_args(
    index_url: str | None, extra_index_urls: Iterable[str] | None, find_links: Iterable[str] | None,
    wheelhouse: str | None, fallback_index_urls: Iterable[str] | None = None,
) -> list:
    """Index options understood alike by pip and uv. A wheelhouse means offline: --no-index.

    fallback_index_urls are added only when none of the find_links folders exists on the host: the
    local torch wheel folder where there is one, PyTorch's index elsewhere.
    """
    args: list = []
    links = present_links(find_links)
    if wheelhouse:
        args += ["--no-index", "--find-links", wheelhouse]
    else:
        if index_url:
            args += ["--index-url", index_url]
        for url in extra_index_urls or ():
            args += ["--extra-index-url", url]
        if not any(is_local_link(link) for link in links):
            for url in fallback_index_urls or ():
                args += ["--extra-index-url", url]
    for link in links:
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


def _missing_package(text: str) -> tuple[str | None, str | None, str | None]:
    """(package, versions there: a list, "none" or "some", required by) from pip's or uv's "not found" words."""
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
    return pkg, versions, required_by


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
    pkg, versions, required_by = _missing_package(text)
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
        shown = ", ".join(v.strip() for v in (versions or "").split(",")[-8:])
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
