"""Turn gpu-kit's slim vLLM stage into a wheelhouse the venv role installs offline (--no-index).

    python3 tools/gpu/wheelhouse_from_stage.py SITE_OR_TREE WHEELS_DIR OUT_DIR [--base-python PY]
        [--more-wheels DIR]... [--name vllm]

SITE_OR_TREE holds an unpacked wheel (vllm/ and vllm-0.26.0.dist-info/, as ../shared/gpu-kit/build.sh stages
it, a few big kernels left out) or a site-packages folder with it among others. It is packed again into a
valid wheel (the files its RECORD names that are there, RECORD written anew with sha256 digests and sizes, WHEEL
kept) and copied into OUT_DIR beside the dependency wheels of WHEELS_DIR.

The slim stage carries only the 33 wheels the H200 image lacks, so some of vLLM's requirements can be met
neither by the base interpreter the serving env is built over (its site-packages, read with importlib.metadata
by PY) nor by the wheelhouse. Those are taken out of the repacked wheel's METADATA (an extra that cannot be met
whole, such as fastapi[standard], becomes the plain requirement plus the extra's members that can) and listed
with the reason in OUT_DIR/DROPPED-REQUIREMENTS.txt. A wheelhouse made with
`pip download vllm==X` on a networked machine needs no such step. The dependency wheels' own requirements are
checked the same way, transitively, and reported (OUT_DIR/UNMET-IN-DEPENDENCIES.txt; exit 3), never changed:
an offline `pip install` would stop at them.
"""

from __future__ import annotations

import argparse
import base64
import csv
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from email.parser import HeaderParser

try:
    from packaging.requirements import Requirement
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version
except ImportError:  # a python without packaging: pip's own copy
    from pip._vendor.packaging.requirements import Requirement  # type: ignore[assignment]
    from pip._vendor.packaging.specifiers import SpecifierSet  # type: ignore[assignment]
    from pip._vendor.packaging.version import InvalidVersion, Version  # type: ignore[assignment]

DROPPED = "DROPPED-REQUIREMENTS.txt"
UNMET = "UNMET-IN-DEPENDENCIES.txt"
INSTALL_TIME = ("RECORD", "INSTALLER", "REQUESTED", "direct_url.json", "RECORD.jws", "RECORD.p7s")
ZIP_DATE = (1980, 1, 1, 0, 0, 0)  # fixed: the same tree gives the same wheel bytes

# Run by the base interpreter (-I: no PYTHONPATH, no user site): what a venv over it with
# --system-site-packages counts as installed, and the values PEP 508 markers are evaluated with.
BASE_PROBE = r"""
import importlib.metadata as md, json, os, platform, re, sys
dists = {}
for d in md.distributions():
    name = d.metadata["Name"]
    key = re.sub(r"[-_.]+", "-", name or "").lower()
    if key and key not in dists:  # the first on sys.path wins, as for pip
        dists[key] = {"name": name, "version": d.version, "requires": d.requires or []}
env = {"implementation_name": sys.implementation.name, "os_name": os.name, "sys_platform": sys.platform,
       "platform_machine": platform.machine(), "platform_release": platform.release(),
       "platform_system": platform.system(), "platform_version": platform.version(),
       "python_full_version": platform.python_version(), "platform_python_implementation": platform.python_implementation(),
       "python_version": ".".join(platform.python_version_tuple()[:2]),
       "implementation_version": platform.python_version()}
print(json.dumps({"executable": sys.executable, "prefix": sys.prefix, "base_prefix": sys.base_prefix,
                  "libc": platform.libc_ver(), "env": env, "dists": dists}))
"""


def canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


# ---------------------------------------------------------------------------------------------------
# What is there: the base interpreter and the wheels


def read_base(python: str) -> dict:
    """The base interpreter's distributions and marker values (BASE_PROBE)."""
    exe = shutil.which(python) or python
    if not os.path.isfile(exe):
        sys.exit(f"--base-python {python} is not found; give the interpreter the serving env is built over (python3)")
    out = subprocess.run([exe, "-I", "-c", BASE_PROBE], capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        sys.exit(f"--base-python {python} does not run: {out.stderr.strip()[-400:]}")
    return json.loads(out.stdout)


def wheel_metadata(path: str) -> str:
    with zipfile.ZipFile(path) as zf:
        name = next(n for n in zf.namelist() if re.match(r"^[^/]+\.dist-info/METADATA$", n))
        return zf.read(name).decode("utf-8")


def _python_tag_ok(py: str, abi: str, minor: int) -> bool:
    for tag in py.split("."):
        m = re.match(r"^(?:cp|py)(\d)(\d*)$", tag)
        if not m or m.group(1) != "3":
            continue
        want = int(m.group(2)) if m.group(2) else None
        if want is None or want == minor or (abi == "abi3" and want <= minor) or (tag.startswith("py") and want <= minor):
            return True
    return False


def _platform_ok(plat: str, machine: str, glibc: tuple) -> bool:
    legacy = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}
    for tag in plat.split("."):
        if tag == "any" or tag == f"linux_{machine}":
            return True
        m = re.match(rf"^(manylinux1|manylinux2010|manylinux2014|manylinux_(\d+)_(\d+))_{machine}$", tag)
        if m:
            need = (int(m.group(2)), int(m.group(3))) if m.group(2) else legacy[m.group(1)]
            if need <= glibc:
                return True
    return False


def tag_problem(filename: str, base: dict) -> str | None:
    """Why the base interpreter cannot install this wheel (python, ABI or platform tag), or None."""
    parts = filename[:-4].split("-")
    py, abi, plat = parts[-3], parts[-2], parts[-1]
    minor = int(base["env"]["python_version"].split(".")[1])
    libc = base.get("libc") or ["", ""]
    glibc = tuple(int(x) for x in libc[1].split(".")[:2]) if libc[0] == "glibc" and libc[1] else (0, 0)
    if not _python_tag_ok(py, abi, minor):
        return f"built for {py}-{abi}, the base runs python {base['env']['python_version']}"
    if not _platform_ok(plat, base["env"]["platform_machine"], glibc):
        return f"built for {plat}, the base is {base['env']['platform_machine']} with glibc {'.'.join(map(str, glibc))}"
    return None


def read_wheels(folders: list, base: dict) -> tuple[dict, list]:
    """({name: [{path, file, version, requires}]}, [(file, why it cannot be installed)]) of the wheels there."""
    index: dict = {}
    unusable = []
    for folder in folders:
        for fn in sorted(os.listdir(folder)):
            if not fn.endswith(".whl"):
                continue
            problem = tag_problem(fn, base)
            if problem:
                unusable.append((fn, problem))
                continue
            path = os.path.join(folder, fn)
            meta = HeaderParser().parsestr(wheel_metadata(path))
            entry = {"path": path, "file": fn, "version": meta["Version"], "requires": meta.get_all("Requires-Dist") or []}
            index.setdefault(canon(meta["Name"]), []).append(entry)
    return index, unusable


# ---------------------------------------------------------------------------------------------------
# Can a requirement be met?


def _version(text: str) -> Version | None:
    try:
        return Version(text)
    except InvalidVersion:
        return None


def choose(req: Requirement, base: dict, index: dict) -> tuple[str, dict | None, str]:
    """('base' | 'wheelhouse' | 'none', the chosen distribution, why not when none). pip keeps an installed
    version that fits (also a pre-release); otherwise it takes the newest fitting wheel."""
    key = canon(req.name)
    have = base["dists"].get(key)
    if have:
        v = _version(have["version"])
        if v is not None and req.specifier.contains(v, prereleases=True):
            return "base", have, ""
    fitting = [w for w in index.get(key, []) if _version(w["version"]) is not None]
    ok = list(req.specifier.filter([Version(w["version"]) for w in fitting]))
    if ok:
        best = max(ok)
        return "wheelhouse", next(w for w in fitting if Version(w["version"]) == best), ""
    seen = [f"the base has {have['version']}"] if have else ["not on the base"]
    seen.append(f"the wheelhouse has {', '.join(w['version'] for w in index[key])}" if key in index else "not in the wheelhouse")
    return "none", None, f"{'; '.join(seen)} (wanted: {req.specifier or 'any version'})"


def applies(req: Requirement, env: dict, extras: frozenset) -> bool:
    """The requirement's marker holds on the base for one of the requested extras (or none)."""
    if req.marker is None:
        return True
    return any(req.marker.evaluate(dict(env, extra=e)) for e in (extras or {""}))


def _members(req: Requirement, dist: dict, env: dict) -> list:
    """The requirements a requirement's extras add (their markers hold here only with one of those extras)."""
    out = []
    for line in dist.get("requires") or []:
        sub = Requirement(line)
        if sub.marker is not None and not applies(sub, env, frozenset()) and applies(sub, env, frozenset(req.extras)):
            sub.marker = None  # it holds on this base: the repacked wheel is made for it
            out.append(sub)
    return out


def meet(req: Requirement, base: dict, index: dict) -> tuple[list, list]:
    """(requirement lines that can be met, what was left out and why) for one requirement. An extra that
    cannot be met whole becomes the plain requirement plus the members of the extra that can be met."""
    where, dist, why = choose(req, base, index)
    if dist is None:
        return [], [f"{req.name}: {why}"]
    if not req.extras:
        return [str(req)], []
    kept, left = [], []
    for sub in _members(req, dist, base["env"]):
        sub_kept, sub_left = meet(sub, base, index)
        kept += sub_kept
        left += sub_left
    if not left:
        return [str(req)], []
    plain = Requirement(str(req))
    plain.extras = set()
    return [str(plain), *kept], left


def plan_top(lines: list, base: dict, index: dict) -> tuple[dict, list]:
    """What happens to each Requires-Dist line of the repacked wheel: {line: [lines instead] (empty: dropped)},
    and [(requirement, what became of it)]. Lines of extras nobody asks for stay as they are."""
    new: dict = {}
    dropped = []
    for line in lines:
        req = Requirement(line)
        if not applies(req, base["env"], frozenset()):
            continue  # another platform or python, or an extra: pip does not look at it
        kept, left = meet(req, base, index)
        if not left:
            continue
        new[line] = kept
        if kept:
            dropped.append((line, f"extras left out ({'; '.join(left)}); written instead: {', '.join(kept)}"))
        else:
            dropped.append((line, left[0].split(": ", 1)[1]))
    return new, dropped


def unmet_closure(top: str, roots: list, base: dict, index: dict) -> tuple[list, dict]:
    """([(required by, requirement, reason)] anywhere below the roots: what an offline pip install would stop at,
    {name: (where, dist)} chosen). One version per distribution, as pip keeps: the one that fits every
    requirement on it seen so far."""
    chosen: dict = {}  # name -> (where, dist)
    wanted: dict = {}  # name -> the requirements on it, all specifiers together
    walked: set = set()
    problems = []
    todo: list = [(top, Requirement(r), frozenset()) for r in roots]
    while todo:
        parent, req, extras = todo.pop(0)
        if not applies(req, base["env"], extras):
            continue
        key = canon(req.name)
        wanted[key] = wanted.get(key, SpecifierSet()) & req.specifier
        where, dist = chosen.get(key, ("none", None))
        v = _version(dist["version"]) if dist else None
        if v is None or not wanted[key].contains(v, prereleases=True):
            both = Requirement(req.name)
            both.specifier = wanted[key]
            where, dist, why = choose(both, base, index)
            chosen[key] = (where, dist)
            if dist is None:
                problems.append((parent, str(req), why))
                continue
        for extra in {""} | set(req.extras):
            if (key, dist["version"], where, extra) in walked:
                continue
            walked.add((key, dist["version"], where, extra))
            for line in dist.get("requires") or []:
                todo.append((f"{req.name} {dist['version']} ({where})", Requirement(line), frozenset({extra} - {""})))
    return problems, chosen


# ---------------------------------------------------------------------------------------------------
# The repacked wheel


def find_dist_info(tree: str, name: str | None) -> str:
    """The dist-info folder of the distribution to repack: the one there, or the one of --name in a site."""
    found = [d for d in os.listdir(tree) if d.endswith(".dist-info") and (not name or canon(d.split("-")[0]) == canon(name))]
    if len(found) != 1:
        sys.exit(f"{tree} holds {len(found)} dist-info folders{' of ' + name if name else ''} ({', '.join(found) or 'none'}); "
                 f"give the unpacked stage (vllm/ and vllm-X.dist-info/) or, for a site-packages folder, --name")
    return found[0]


def rewrite_metadata(text: str, new: dict) -> str:
    """METADATA with the planned Requires-Dist lines replaced (by none or more); everything else byte for byte."""
    head, sep, body = text.partition("\n\n")
    out = []
    for line in head.split("\n"):
        m = re.match(r"^Requires-Dist:\s*(.*)$", line)
        if m and m.group(1).strip() in new:
            out += [f"Requires-Dist: {repl}" for repl in new[m.group(1).strip()]]
            continue
        out.append(line)
    return "\n".join(out) + sep + body


def wheel_tag(wheel_text: str) -> str:
    tags = [t.strip() for t in re.findall(r"^Tag:\s*(.+)$", wheel_text, re.M)]
    if not tags:
        sys.exit("the dist-info's WHEEL file names no Tag; the tree is not an unpacked wheel")
    parts = [t.split("-") for t in tags]
    return "-".join(".".join(dict.fromkeys(p[i] for p in parts)) for i in range(3))


def record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def tree_files(tree: str, dist_info: str) -> tuple[list, list]:
    """(files to pack, files the RECORD names that the stage left out), by the original RECORD."""
    with open(os.path.join(tree, dist_info, "RECORD"), newline="") as fh:
        names = [row[0] for row in csv.reader(fh) if row]
    keep: list = []
    missing: list = []
    for rel in names:
        if rel.startswith(("/", "../")) or "/../" in rel or "__pycache__/" in rel or rel.endswith(".pyc"):
            continue
        if rel.startswith(dist_info + "/") and rel.split("/", 1)[1] in INSTALL_TIME:
            continue
        (keep if os.path.isfile(os.path.join(tree, rel)) else missing).append(rel)
    return keep, missing


def repack(tree: str, dist_info: str, metadata: str, out_dir: str) -> str:
    """Write NAME-VERSION-TAG.whl from the tree with the new METADATA and a fresh RECORD; return its path."""
    files, _ = tree_files(tree, dist_info)
    with open(os.path.join(tree, dist_info, "WHEEL")) as fh:
        tag = wheel_tag(fh.read())
    stem = dist_info[: -len(".dist-info")]
    path = os.path.join(out_dir, f"{stem}-{tag}.whl")
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    with zipfile.ZipFile(path + ".part", "w", zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        for rel in files:
            src = os.path.join(tree, rel)
            with open(src, "rb") as fh:
                data = metadata.encode() if rel == f"{dist_info}/METADATA" else fh.read()
            info = zipfile.ZipInfo(rel, ZIP_DATE)
            info.external_attr = (os.stat(src).st_mode & 0o777 | 0o100000) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, data, compresslevel=1)
            writer.writerow([rel, record_hash(data), len(data)])
        writer.writerow([f"{dist_info}/RECORD", "", ""])
        zf.writestr(zipfile.ZipInfo(f"{dist_info}/RECORD", ZIP_DATE), record.getvalue())
    os.replace(path + ".part", path)
    return path


# ---------------------------------------------------------------------------------------------------
# The command


def write_reports(out_dir: str, base: dict, dist: str, dropped: list, unmet: list, unusable: list, missing: list) -> None:
    where = f"the base {base['executable']} (python {base['env']['python_version']}) or the wheelhouse"
    head = (f"# {dist}: requirements neither {where} can meet, taken out of the repacked wheel's METADATA.\n"
            f"# The slim stage's limit: a wheelhouse from `pip download` on a networked machine needs no such step.\n")
    lines = [f"{req}\t{why}" for req, why in dropped]
    if missing:
        lines.append(f"# {len(missing)} file(s) of its RECORD are not in the stage (left out by gpu-kit), e.g. {missing[0]}")
    if unusable:
        lines += [f"# wheel not installable on the base: {fn}: {why}" for fn, why in unusable]
    with open(os.path.join(out_dir, DROPPED), "w") as fh:
        fh.write(head + "\n".join(lines) + "\n")
    unmet_path = os.path.join(out_dir, UNMET)
    if unmet:
        with open(unmet_path, "w") as fh:
            fh.write(f"# Requirements below {dist} that {where} cannot meet: an offline pip install stops here.\n")
            fh.write("\n".join(f"{parent}\t{req}\t{why}" for parent, req, why in unmet) + "\n")
    elif os.path.exists(unmet_path):
        os.unlink(unmet_path)


def base_warning(base: dict) -> str | None:
    if os.path.realpath(base["prefix"]) == os.path.realpath(base["base_prefix"]):
        return None
    return (f"note: {base['executable']} is itself a virtual environment ({base['prefix']}, over "
            f"{base['base_prefix']}); the venv role's env built over it (venv_build_python {base['executable']}, "
            f"venv_system_site_packages: true) sees {base['prefix']}'s site-packages through a .pth file the tool "
            "writes, so the requirements they meet here are met there too")


def main(argv: list | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tree", help="the unpacked stage (vllm/ and vllm-X.dist-info/) or a site-packages holding it")
    ap.add_argument("wheels", help="folder of the dependency wheels")
    ap.add_argument("out", help="the wheelhouse to write (created; the repacked wheel and copies of the wheels)")
    ap.add_argument("--base-python", default=sys.executable, help="the interpreter the serving env is built over")
    ap.add_argument("--more-wheels", action="append", default=[], metavar="DIR",
                    help="another folder of wheels for what the stage lacks (repeatable)")
    ap.add_argument("--name", help="the distribution to repack, where the folder holds several (a site-packages)")
    a = ap.parse_args(argv)
    base = read_base(a.base_python)
    dist_info = find_dist_info(a.tree, a.name)
    with open(os.path.join(a.tree, dist_info, "METADATA"), encoding="utf-8") as fh:
        metadata = fh.read()
    index, unusable = read_wheels([a.wheels, *a.more_wheels], base)
    requires = HeaderParser().parsestr(metadata).get_all("Requires-Dist") or []
    new, dropped = plan_top(requires, base, index)
    kept = [out for line in requires for out in new.get(line, [line])]
    unmet, chosen = unmet_closure(dist_info.split("-")[0], kept, base, index)
    unused = sorted(w["file"] for key, group in index.items() for w in group if chosen.get(key, ("", None))[1] is not w)
    os.makedirs(a.out, exist_ok=True)
    for group in index.values():
        for w in group:
            shutil.copy2(w["path"], os.path.join(a.out, w["file"]))
    path = repack(a.tree, dist_info, rewrite_metadata(metadata, new), a.out)
    write_reports(a.out, base, dist_info, dropped, unmet, unusable, tree_files(a.tree, dist_info)[1])
    print(f"{path}: {sum(len(g) for g in index.values())} dependency wheels beside it; {len(dropped)} requirement(s) "
          f"dropped or narrowed ({os.path.join(a.out, DROPPED)})")
    if unused:
        print(f"warning: nothing below {dist_info} requires these wheels, pip will not install them: {', '.join(unused)}")
    warning = base_warning(base)
    if warning:
        print(warning)
    if unmet:
        print(f"{len(unmet)} requirement(s) below {dist_info} cannot be met offline ({os.path.join(a.out, UNMET)}):")
        for parent, req, why in unmet:
            print(f"  {parent} needs {req}: {why}")
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
