"""unarchive (library/unarchive.py, the engine's upload in engine/run/actions/files.py) against real ansible-core's:
the same sequence of tasks (control-node tar.gz, host tar.xz/tar.bz2/zip, again, check mode, creates, include,
exclude, --strip-components, mode, a file changed in dest, failures) run by ansible-playbook (gtar, unzip) and by
us (tarfile, zipfile), each side into its own folders; compared per task: failed, changed, skipped, msg, handler,
dest, files; then every tree left (kinds, modes, contents, link targets, mtimes). Ours only: an archive whose
members leave dest is refused before anything is written (a member with an absolute name lands inside dest,
its leading / stripped, as GNU tar does)."""

from __future__ import annotations

import io
import os
import stat
import tarfile
import time
import zipfile
from pathlib import Path

import pytest
import yaml
from _ansible_side import placed, registered_by_ansible, registered_by_ours, same_flags

from engine.api import run_playbook
from tests.helpers import required_ansible_tool

MTIME = 1577934245
TREE = [("top/", None, 0o755), ("top/a.txt", b"alpha\n", 0o644), ("top/bin/", None, 0o755),
        ("top/bin/run.sh", b"#!/bin/sh\necho hi\n", 0o755), ("top/link", "a.txt", 0o777), ("top/b.log", b"log\n", 0o600)]

# id, task ("@": the side's folder, "F": the shared folder of archives on the host)
SEQUENCE = [
    ("tgz-control-node", {"unarchive": {"src": "a.tar.gz", "dest": "@/d1", "list_files": True}}),
    ("tgz-again", {"unarchive": {"src": "a.tar.gz", "dest": "@/d1"}}),
    ("tgz-check", {"unarchive": {"src": "a.tar.gz", "dest": "@/d2"}, "check_mode": True}),
    ("txz-remote", {"unarchive": {"src": "F/a.tar.xz", "dest": "@/d3", "remote_src": True}}),
    ("tbz-remote", {"unarchive": {"src": "F/a.tar.bz2", "dest": "@/d4", "remote_src": True}}),
    ("zip-check", {"unarchive": {"src": "F/a.zip", "dest": "@/d5", "remote_src": True}, "check_mode": True}),
    ("zip-remote", {"unarchive": {"src": "F/a.zip", "dest": "@/d5", "remote_src": True, "list_files": True}}),
    ("zip-again", {"unarchive": {"src": "F/a.zip", "dest": "@/d5", "remote_src": True}}),
    ("zip-again-check", {"unarchive": {"src": "F/a.zip", "dest": "@/d5", "remote_src": True}, "check_mode": True}),
    ("creates", {"unarchive": {"src": "F/a.tar.xz", "dest": "@/d3", "remote_src": True, "creates": "@/d3/top"}}),
    ("strip", {"unarchive": {"src": "F/a.tar.xz", "dest": "@/d6", "remote_src": True,
                             "extra_opts": ["--strip-components=1"], "list_files": True}}),
    ("exclude", {"unarchive": {"src": "F/a.tar.xz", "dest": "@/d7", "remote_src": True, "exclude": ["top/b.log"],
                               "list_files": True}}),
    ("include-exclude", {"unarchive": {"src": "F/a.tar.xz", "dest": "@/d7", "remote_src": True,
                                       "exclude": ["x"], "include": ["y"]}}),
    ("mode", {"unarchive": {"src": "F/a.tar.xz", "dest": "@/d3", "remote_src": True, "mode": "u+rwX,g-rwx,o-rwx"}}),
    ("changed-in-dest", {"unarchive": {"src": "F/a.tar.xz", "dest": "@/d4", "remote_src": True}}),
    ("dest-missing", {"unarchive": {"src": "F/a.tar.xz", "dest": "@/nope", "remote_src": True}}),
    ("src-missing", {"unarchive": {"src": "F/none.tar", "dest": "@/d3", "remote_src": True}}),
]
BEFORE = {"changed-in-dest": "d4/top/a.txt"}  # a file each side changes before that task (done by a task)


def _archive(folder: Path) -> None:
    folder.mkdir()
    for suffix, mode in (("tar.gz", "w:gz"), ("tar.xz", "w:xz"), ("tar.bz2", "w:bz2")):
        with tarfile.open(folder / f"a.{suffix}", mode) as tar:
            for name, data, perm in TREE:
                info = tarfile.TarInfo(name.rstrip("/"))
                info.mtime, info.mode, info.uid, info.gid = MTIME, perm, os.getuid(), os.getgid()
                if name.endswith("/"):
                    info.type = tarfile.DIRTYPE
                    tar.addfile(info)
                elif isinstance(data, str):
                    info.type, info.linkname = tarfile.SYMTYPE, data
                    tar.addfile(info)
                else:
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
    with zipfile.ZipFile(folder / "a.zip", "w") as zf:
        for name, data, perm in TREE:
            if isinstance(data, str):
                continue  # zip symlinks: not compared
            info = zipfile.ZipInfo(name, time.localtime(MTIME)[:6])
            info.external_attr = ((stat.S_IFDIR if data is None else stat.S_IFREG) | perm) << 16
            zf.writestr(info, data or b"")


def _tasks(side: Path, files: Path) -> list[tuple[str, dict]]:
    out = []
    for cid, task in SEQUENCE:
        if cid in BEFORE:
            out.append((f"edit-{cid}", {"copy": {"dest": str(side / BEFORE[cid]), "content": "edited\n"}}))
        out.append((cid, placed(task, {"@": str(side), "F/": f"{files}/"})))
    return out


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    work = tmp_path_factory.mktemp("unarchive")
    _archive(work / "files")
    for side in ("ansible", "ours"):
        for n in range(1, 8):
            (work / side / f"d{n}").mkdir(parents=True)
    (work / "home").mkdir()
    theirs = registered_by_ansible(required_ansible_tool("ansible-playbook"), work / "home", work,
                                   _tasks(work / "ansible", work / "files"))
    return work, theirs, registered_by_ours(work / "ours.yaml", _tasks(work / "ours", work / "files"))


def _scrub(value, work: Path, side: str):
    if isinstance(value, str):
        return value.replace(str(work / side), "<dir>")
    if isinstance(value, list):
        return sorted(_scrub(v, work, side) for v in value)
    return value


@pytest.mark.parametrize("cid", [c[0] for c in SEQUENCE])
def test_unarchive_as_ansibles(both, cid):
    work, theirs, ours = both
    t, o = theirs[cid], ours[cid]
    same_flags(t, o, "failed", "changed", "skipped")
    if t.get("failed") or t.get("skipped"):
        assert _scrub(o["msg"], work, "ours") == _scrub(t["msg"], work, "ansible"), (t, o)
        return
    for key in ("handler", "dest", "files", "mode", "owner", "state"):
        assert _scrub(o.get(key), work, "ours") == _scrub(t.get(key), work, "ansible"), (key, t, o)
    assert ("extract_results" in o) == ("extract_results" in t), (t, o)


def _tree(root: Path) -> dict:
    out = {}
    for p in sorted(root.rglob("*")):
        st = p.lstat()
        rel = str(p.relative_to(root))
        if stat.S_ISLNK(st.st_mode):
            out[rel] = ("link", os.readlink(p))
        elif stat.S_ISDIR(st.st_mode):
            out[rel] = ("dir", oct(stat.S_IMODE(st.st_mode)))
        else:
            out[rel] = ("file", oct(stat.S_IMODE(st.st_mode)), p.read_bytes(), int(st.st_mtime), st.st_uid)
    return out


def test_trees_left_alike(both):
    work, _t, _o = both
    assert _tree(work / "ours") == _tree(work / "ansible")


@pytest.mark.parametrize("name,linkname", [("../escape.txt", None), ("a/../../escape.txt", None),
                                           ("ok/link", "../../etc/passwd"), ("ok/abs-link", "/etc/passwd")])
def test_members_leaving_dest_refused(tmp_path, name, linkname):
    archive = tmp_path / "bad.tar"
    with tarfile.open(archive, "w") as tar:
        info = tarfile.TarInfo(name)
        if linkname:
            info.type, info.linkname = tarfile.SYMTYPE, linkname
            tar.addfile(info)
        else:
            info.size = 3
            tar.addfile(info, io.BytesIO(b"bad"))
    dest = tmp_path / "dest"
    dest.mkdir()
    book = tmp_path / "book.yaml"
    book.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": [
        {"unarchive": {"src": str(archive), "dest": str(dest), "remote_src": True}}]}]))
    run = run_playbook(str(book), inventory={"all": {"hosts": {"h": {"ansible_connection": "local"}}}})
    result = run.results[0].result
    assert result["failed"] and ("outside" in result["msg"] or "refused" in result["msg"]), result
    assert list(dest.iterdir()) == [] and not (tmp_path / "escape.txt").exists()
