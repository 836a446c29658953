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
from typing import NamedTuple

from dflash_host.env.interpreter import DEFAULT_TOOL_DIR, ENV_MARKER, Output, run_cmd
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


def _run_live(argv: list, args: dict, ctx: Context, what: str, cwd: str | None, pass_fds: Iterable[int]) -> Output:
    """Run an installer command line, its progress lines said live; a run past timeout_s is a ModuleError."""

    def progress(line: str) -> None:
        if line.lstrip().startswith(PROGRESS):
            ctx.say(line.strip()[:200])

    out = run_cmd(argv, timeout=args["timeout_s"], on_line=progress, cwd=cwd, pass_fds=pass_fds)
    if out.timed_out:
        raise ModuleError(f"{what} took longer than timeout_s={args['timeout_s']} s and was stopped; raise timeout_s")
    return out


def _failed(out: Output, args: dict, src: list, what: str, fix_where: str) -> ModuleError:
    return ModuleError(
        explain_failure(out.text, source_names(args, src, out.text), what, fix_where),
        output_tail=out.text.strip().splitlines()[-30:],
    )


def run_installer(
    argv: list, args: dict, ctx: Context, what: str, fix_where: str, cwd: str | None = None, pass_fds: Iterable[int] = ()
) -> str:
    """Run an installer command line, its progress lines said live; returns its output.

    args: the module's timeout_s and package sources. A run past timeout_s is stopped; a failure is a
    ModuleError naming the package and the fix (explain_failure; `what` is the step, `fix_where` the variables
    that set the requirements), with the output's last lines.
    """
    out = _run_live(argv, args, ctx, what, cwd, pass_fds)
    if out.rc != 0:
        raise _failed(out, args, package_sources(args), what, fix_where)
    return out.text


def install(
    kind: str, uv: str | None, python: str, specs: list, args: dict, ctx: Context, what: str, fix_where: str,
    compile_bytecode: bool = True, extra: Iterable[str] = (), more_sources: Iterable[str] = (),
    cwd: str | None = None, pass_fds: Iterable[int] = (),
) -> str:
    """Install specs into python's environment from the module's package sources (and more_sources); returns
    the installer's output.

    Where a find_links folder exists, fallback_index_urls are held back (the folder's wheels are preferred, and
    a host with the folder needs no network to the fallback); when the install then lacks a package that none
    of the folders and indexes has, it runs again with fallback_index_urls added, saying so. A failure is one
    paragraph naming the package, each source that was asked (and which did not answer) and the fix.
    """
    more = list(more_sources)
    src = package_sources(args) + more
    out = _run_live(install_argv(kind, uv, python, specs, src, compile_bytecode, extra), args, ctx, what, cwd, pass_fds)
    held = held_back_fallback(args)
    if out.rc != 0 and held:
        pkg = _missing_package(out.text)[0]
        if pkg and not _CONNECT.search(out.text):
            folders = [str(link) for link in present_links(args.get("find_links")) if is_local_link(link)]
            ctx.warn(
                f"find_links {', '.join(folders)}: no wheel for {pkg} there; asked fallback_index_urls "
                f"({', '.join(held)}) for it"
            )
            src = package_sources(args, fallback=True) + more
            argv = install_argv(kind, uv, python, specs, src, compile_bytecode, extra)
            out = _run_live(argv, args, ctx, what, cwd, pass_fds)
    if out.rc != 0:
        raise _failed(out, args, src, what, fix_where)
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


def held_back_fallback(args: dict) -> list:
    """The fallback_index_urls that package_sources leaves out at first: those of a module whose find_links name a
    folder that exists on this host (install() asks them only when no folder has a wheel the install needs)."""
    if args.get("wheelhouse") or not any(is_local_link(link) for link in present_links(args.get("find_links"))):
        return []
    return [str(url) for url in args.get("fallback_index_urls") or ()]


def package_sources(args: dict, wheelhouse: str | None = None, fallback: bool = False) -> list:
    """Index options for a module's package-source arguments (index_url, extra_index_urls, find_links,
    fallback_index_urls, wheelhouse); wheelhouse overrides args' own when given; fallback: add
    fallback_index_urls even where a find_links folder exists."""
    return source_args(
        args.get("index_url"), args.get("extra_index_urls"), args.get("find_links"),
        wheelhouse if wheelhouse is not None else args.get("wheelhouse"), args.get("fallback_index_urls"), fallback,
    )


def source_args(
    index_url: str | None, extra_index_urls: Iterable[str] | None, find_links: Iterable[str] | None,
    wheelhouse: str | None, fallback_index_urls: Iterable[str] | None = None, fallback: bool = False,
) -> list:
    """Index options understood alike by pip and uv. A wheelhouse means offline: --no-index.

    fallback_index_urls are added when none of the find_links folders exists on the host (the local torch
    wheel folder where there is one, PyTorch's index elsewhere), or when `fallback` says so (install(): no
    folder has the wheel).
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
        if fallback or not any(is_local_link(link) for link in links):
            for url in fallback_index_urls or ():
                args += ["--extra-index-url", url]
    for link in links:
        args += ["--find-links", link]
    return args


class Source(NamedTuple):
    """A package source an installer run was given: an index or a find-links folder/URL, and the argument
    (the inventory variable of the same name) that set it."""

    kind: str  # "index" or "links"
    location: str
    field: str


DEFAULT_INDEX = "https://pypi.org/simple"


def source_names(args: dict, src: list, text: str = "") -> list:
    """The Sources in an installer's source options (source_args), each with the argument that set it; the
    installer's default index (pip's "Looking in indexes" in text, else PyPI) when no --index-url replaces it."""
    out: list = []
    fields = [("index_url", [args.get("index_url")]), ("extra_index_urls", args.get("extra_index_urls") or []),
              ("fallback_index_urls", args.get("fallback_index_urls") or []), ("wheelhouse", [args.get("wheelhouse")]),
              ("find_links", args.get("find_links") or [])]

    def field_of(value: str) -> str:
        return next((name for name, values in fields if value in [str(v) for v in values if v]), "")

    if "--no-index" not in src and "--index-url" not in src:
        seen = re.search(r"Looking in indexes: (\S+)", text)
        out.append(Source("index", seen.group(1).rstrip(",") if seen else DEFAULT_INDEX, "the default index"))
    for opt, value in zip(src, src[1:]):
        if opt in ("--index-url", "--extra-index-url"):
            out.append(Source("index", value, field_of(value)))
        elif opt == "--find-links":
            out.append(Source("links", value, field_of(value)))
    return out


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


def _named(sources: Iterable[Source]) -> str:
    return ", ".join(f"{s.location} ({s.field})" if s.field else s.location for s in sources)


def _failed_fetch(text: str) -> str | None:
    """The URL a connection failure names (uv: "Failed to fetch: URL"; pip: "Could not fetch URL URL")."""
    for line in text.splitlines():
        if _CONNECT.search(line):
            m = re.search(r"https?://[^\s)'\"`]+", line)
            if m:
                return m.group(0).rstrip(":.,")
    return None


def explain_failure(text: str, sources: list, what: str, fix_where: str) -> str:
    """One paragraph for an installer failure: which package, what is wrong, and the fix.

    sources: the Sources the run was given (source_names); an index among them that does not answer is named
    with the argument that set it, never one that answered. what: a few words for the step ("building the
    serving environment"); fix_where: where the user sets the requirements ("vllm_version / extra_requirements").
    """
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    indexes = [s for s in sources if s.kind == "index"]
    folders = [s for s in sources if s.kind == "links"]
    wheelhouse = next((s.location for s in folders if s.field == "wheelhouse"), None)
    pkg, versions, required_by = _missing_package(text)
    via = f" (required by {required_by})" if required_by else ""

    if pkg and wheelhouse:
        return (
            f"{what} failed: the wheelhouse {wheelhouse} has no wheel for {pkg}{via} (the install runs offline "
            f"with --no-index); add it on a machine with network: `python3 -m pip download '{pkg}' -d "
            f"WHEELHOUSE` for the host's python version and platform, and push the wheelhouse again"
        )
    connect = _CONNECT.search(text)
    down = [s for s in indexes if not index_reachable(s.location)] if connect or pkg else []
    subject = f" for {pkg}{via}" if pkg else ""
    if down:
        up = [s for s in indexes if s not in down]
        answered = f", while {_named(up)} answered" if up else ""
        why = ""
        if any(s.field == "fallback_index_urls" for s in down):
            why = (
                f"; fallback_index_urls are asked where no find_links folder "
                f"({', '.join(s.location for s in folders) or 'none given'}) is on this host or has the wheel: "
                f"putting the wheel into such a folder needs no network"
            )
        fields = " / ".join(dict.fromkeys(s.field if s.field != "the default index" else "index_url" for s in down))
        return (
            f"{what} failed: the package index {_named(down)} cannot be reached{subject}{answered} (no network "
            f"to it, a proxy or a wrong URL){why}; fix {fields or 'index_url'} or the proxy, or give the role a "
            f"wheelhouse (variable `wheelhouse`: a folder of wheels on the control node, pushed to the host and "
            f"installed with --no-index)"
        )
    if connect:
        failed = _failed_fetch(text)
        cause = next((ln for ln in lines if ln.startswith(("cause:", "ERROR"))), lines[-1] if lines else "")
        return (
            f"{what} failed: fetching {failed or 'a package'} failed ({cause}), though the package indexes "
            f"{_named(indexes)} answer now (a proxy, a flaky network, or a file host other than the index); run "
            f"it again, fix the proxy, or give the role a wheelhouse (variable `wheelhouse`: a folder of wheels on "
            f"the control node, pushed to the host and installed with --no-index)"
        )
    where = _named(indexes)
    searched = f"{where}" + (f" and the find_links {_named(folders)}" if folders else "")
    if pkg and "+" in pkg:
        asked_folders = [s.location for s in folders if is_local_link(s.location)]
        more_indexes = [s for s in indexes if s.field in ("extra_index_urls", "fallback_index_urls")]
        put = (f"put its wheel into {' or '.join(asked_folders)}" if asked_folders
               else "add a folder holding its wheel to find_links (e.g. /opt/wheels)")
        add = ("or the index that has it to extra_index_urls" if more_indexes
               else "or add the index that has it to extra_index_urls (e.g. https://download.pytorch.org/whl/cpu)")
        return (
            f"{what} failed: {pkg}{via} was not found in any package source asked ({searched}): a local build "
            f"such as '+{pkg.split('+', 1)[1]}' comes from its own index or folder; {put}, {add}"
        )
    if pkg and versions not in ("none", "some"):
        shown = ", ".join(v.strip() for v in (versions or "").split(",")[-8:])
        return (
            f"{what} failed: {pkg}{via} does not exist in that version on {searched} (latest versions there: "
            f"{shown}); fix the version in {fix_where}"
        )
    if pkg and versions == "some":
        return f"{what} failed: {pkg}{via} does not exist in that version on {searched}; fix the version in {fix_where}"
    if pkg:
        return (
            f"{what} failed: no package {pkg}{via} was found on {searched}; fix its name in {fix_where}, or add "
            f"the index or folder that has it (index_url, extra_index_urls, find_links)"
        )
    if "ResolutionImpossible" in text or "conflicting dependencies" in text or "No solution found" in text:
        keep = [ln for ln in lines if ln.startswith(("The user requested", "cause:", "ERROR: Cannot install"))]
        keep += [ln for ln in lines if " depends on " in ln][:6]
        detail = "; ".join(dict.fromkeys(keep)) or lines[-1]
        return f"{what} failed: the requirements conflict ({detail}); fix the versions in {fix_where}"
    errs = [ln for ln in lines if ln.startswith(("ERROR", "error", "cause:"))] or lines[-3:]
    return f"{what} failed: {' '.join(errs[:4])}"
