"""What the differential tests of file and copy against real ansible-core share: the same tree built for each case
on both sides, one ansible-playbook run for every case (a looped task per set of flags: check, diff), ours run by
hand per case (`python3 -m library.NAME ARGS.json`), results with the case's folder written as <dir>, and the tree
after as both compare it.

Imported by test_file_against_ansible.py and test_copy_against_ansible.py (tests/library/conftest.py puts this
folder on sys.path).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from engine.api import run_playbook
from tests.helpers import required_ansible_tool

ROOT = Path(__file__).resolve().parents[2]
FIXED = 1577934245.0  # 2020-01-02 03:04:05 UTC: every mtime in a tree before the run
RECENT = 3600  # a time within this of the run is "now" (touch, a write)
DROP = {"invocation", "item", "ansible_loop_var", "_ansible_no_log", "_ansible_item_label", "failed", "changed",
        "msg", "diff", "warnings", "deprecations", "exception"}  # compared on their own, or the controller's own


class Link(str):
    """A symlink's text, in a tree."""


class Hard(str):
    """Another name of the tree's file of this name (a hard link)."""


def build(root: Path, tree: dict) -> None:
    """root holding `tree` ({"dir/": mode, "f": (bytes, mode), "l": Link(text), "h": Hard(name)}, in order); every
    mtime FIXED, every atime a day ahead (so that reading a file or a link does not move it under relatime)."""
    root.mkdir(parents=True)
    for rel, what in tree.items():
        path = root / rel.rstrip("/")
        if rel.endswith("/"):
            path.mkdir()
            os.chmod(path, what)
        elif isinstance(what, Link):
            path.symlink_to(what)
        elif isinstance(what, Hard):
            os.link(root / what, path)
        else:
            path.write_bytes(what[0])
            os.chmod(path, what[1])
    ahead = time.time() + 86400
    for p in [*sorted(root.rglob("*"), reverse=True), root]:
        os.utime(p, (ahead, FIXED), follow_symlinks=False)


def when(t: float, now: float) -> object:
    return "now" if abs(t - now) < RECENT else round(t, 3)


def snapshot(root: Path, now: float) -> dict:
    """{relative path: (kind, mode, content or link text, nlink, uid, gid, mtime)} of everything under root (a
    time near the run as "now")."""
    out: dict = {}
    for p in sorted(root.rglob("*")):
        st = p.lstat()
        if stat.S_ISLNK(st.st_mode):
            out[str(p.relative_to(root))] = ("link", os.readlink(p).replace(str(root), "<dir>"), st.st_uid, st.st_gid)
            continue
        kind = "dir" if stat.S_ISDIR(st.st_mode) else "file"
        content = p.read_bytes() if kind == "file" else None
        out[str(p.relative_to(root))] = (kind, oct(stat.S_IMODE(st.st_mode)), content, st.st_nlink if kind == "file"
                                         else None, st.st_uid, st.st_gid, when(st.st_mtime, now))
    return out


def scrub(value, folder: Path, now: float):
    """`value` with the case's folder written as <dir> and times near the run as "now" (lists of paths sorted)."""
    if isinstance(value, dict):
        return {k: scrub(v, folder, now) for k, v in value.items()}
    if isinstance(value, list):
        items = [scrub(v, folder, now) for v in value]
        return sorted(items) if all(isinstance(i, str) for i in items) else items
    if isinstance(value, str):
        return value.replace(str(folder), "<dir>")
    if isinstance(value, float) and not isinstance(value, bool):
        return when(value, now)
    return value


def python_with_ansible(tool: Path) -> str:
    """The python that runs an Ansible tool (its shebang): the one ansible-core is installed for."""
    first = tool.read_text(errors="replace").splitlines()[0]
    return first[2:].strip() if first.startswith("#!") else sys.executable


def env(home: Path) -> dict:
    return {"PATH": "/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8", "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_LOCAL_TEMP": str(home / ".ansible-tmp"), "ANSIBLE_REMOTE_TEMP": str(home / ".ansible-remote"),
            "ANSIBLE_DEPRECATION_WARNINGS": "0"}


FLAG_SETS = ("", "check", "diff", "check,diff")


def run_ansible(work: Path, module: str, cases: list[tuple[str, dict, str]]) -> tuple[dict, str]:
    """({case id: Ansible's registered result}, what it printed): one ansible-playbook run (local connection, the python ansible-core
    runs on), a looped task per flag set over the cases' arguments (already pointing into their folders)."""
    playbook_tool = required_ansible_tool("ansible-playbook")
    home = work / "ansible-home"
    home.mkdir()
    tasks = []
    for n, flags in enumerate(FLAG_SETS):
        items = [{"cid": cid, "args": args} for cid, args, f in cases if f == flags]
        if items:
            tasks.append({"name": f"cases {flags or 'plain'}", f"ansible.builtin.{module}": {}, "args": "{{ item.args }}",
                          "loop": items, "loop_control": {"label": "{{ item.cid }}"}, "register": f"r{n}",
                          "ignore_errors": True, "check_mode": "check" in flags, "diff": "diff" in flags})
    out_file = work / "theirs.json"
    collected = " + ".join(f"(r{n}.results | default([]))" for n in range(len(FLAG_SETS)))
    tasks.append({"name": "write", "ansible.builtin.copy": {"dest": str(out_file),
                                                            "content": "{{ (" + collected + ") | to_json }}"}})
    book = work / "book.yaml"
    book.write_text(json.dumps([{"hosts": "localhost", "gather_facts": False, "tasks": tasks}]))
    proc = subprocess.run(
        [str(playbook_tool), "-i", "localhost,", "-c", "local", "-e",
         f"ansible_python_interpreter={python_with_ansible(playbook_tool)}", str(book)],
        capture_output=True, text=True, timeout=600, cwd=home, env=env(home))
    assert proc.returncode == 0 and out_file.exists(), f"ansible-playbook failed:\n{proc.stdout}\n{proc.stderr}"
    return {r["item"]["cid"]: r for r in json.loads(out_file.read_text())}, proc.stdout + proc.stderr


def run_ours(module: str, work: Path, cid: str, args: dict, flags: str) -> dict:
    """Ours, by hand from the repository root, as the worker runs it (the same HOME as Ansible's)."""
    args_file = work / f"{cid}.args.json"
    args_file.write_text(json.dumps(args))
    options = [f"--{f}" for f in flags.split(",") if f]
    proc = subprocess.run([sys.executable, "-m", f"library.{module}", str(args_file), *options], capture_output=True,
                          text=True, timeout=60, cwd=ROOT, env=env(work / "ansible-home"))
    assert proc.stderr == "", proc.stderr
    return json.loads(proc.stdout)


def fields(result: dict) -> dict:
    """A result's fields less those compared on their own (changed, msg, diff, warnings) and the controller's."""
    return {k: v for k, v in result.items() if k not in DROP and not k.startswith("_ansible")}


def warnings_of(result: dict) -> list:
    """Our warnings (Ansible's registered results hold none: its controller prints them, and we look there)."""
    return list(result.get("warnings") or [])


def registered_by_ansible(tool: Path, home: Path, work: Path, tasks: list[tuple[str, dict]]) -> dict:
    """{case id: what Ansible registered}: each (case id, task) one task of a single ansible-playbook run on
    localhost (failures ignored, so every case registers), the results written out by a last copy task."""
    out_file = work / "theirs.json"
    play = [dict(task, name=cid, register=f"r{i}", ignore_errors=True) for i, (cid, task) in enumerate(tasks)]
    collected = ", ".join(f"'{cid}': r{i}" for i, (cid, _task) in enumerate(tasks))
    play.append({"name": "write", "copy": {"dest": str(out_file), "content": "{{ {" + collected + "} | to_json }}"}})
    book = work / "book.yaml"
    book.write_text(json.dumps([{"hosts": "localhost", "gather_facts": False, "tasks": play}]))
    proc = subprocess.run(
        [str(tool), "-i", "localhost,", "-c", "local", "-e", f"ansible_python_interpreter={python_with_ansible(tool)}",
         str(book)], capture_output=True, text=True, timeout=300, cwd=home, env=env(home))
    assert proc.returncode == 0 and out_file.exists(), f"ansible-playbook failed:\n{proc.stdout}\n{proc.stderr}"
    return json.loads(out_file.read_text())


def registered_by_ours(book: Path, tasks: list[tuple[str, dict]]) -> dict:
    """{case id: what ours registered}: the same (case id, task) pairs as registered_by_ansible's, one playbook
    written to `book` and run by our engine on a local host (failures ignored, so every case registers)."""
    play = [dict(task, name=cid, ignore_errors=True) for cid, task in tasks]
    book.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": play}], sort_keys=False))
    run = run_playbook(str(book), inventory={"all": {"hosts": {"h": {"ansible_connection": "local"}}}})
    assert not run.error, run.error
    return {r.task: r.result for r in run.results}


def placed(value, marks: dict[str, str]):
    """`value` (a case's task, or a result) with each mark in its strings replaced, in the order given: the case
    tables write a side's folder, names or server as marks, so that one table serves both tools."""
    if isinstance(value, str):
        for mark, text in marks.items():
            value = value.replace(mark, text)
        return value
    if isinstance(value, list):
        return [placed(v, marks) for v in value]
    if isinstance(value, dict):
        return {k: placed(v, marks) for k, v in value.items()}
    return value


def registered_by_both(work: Path, tasks: Callable[[Path], list[tuple[str, dict]]]) -> dict:
    """{case id: (Ansible's result, ours, Ansible's case folder, ours)}: `tasks(folder)` gives the (case id, task)
    pairs for one side's cases under `folder` (work/ansible/t for Ansible, work/ourside/t for ours), each side's
    run by its tool."""
    home, mine = work / "ansible", work / "ourside"
    theirs = registered_by_ansible(required_ansible_tool("ansible-playbook"), home, home, tasks(home / "t"))
    ours = registered_by_ours(mine / "book.yaml", tasks(mine / "t"))
    return {cid: (theirs[cid], ours[cid], home / "t" / cid, mine / "t" / cid) for cid in theirs}


def same_flags(theirs: dict, ours: dict, *flags: str) -> None:
    """Each flag (failed, changed, skipped) set in both results or in neither: the first thing a case compares."""
    for flag in flags:
        assert bool(ours.get(flag)) == bool(theirs.get(flag)), (flag, theirs, ours)
