"""copy with `src:` on the control node (engine/run/actions/files.py) against real ansible-playbook: the same
tasks, each in its own copy of one tree, run by Ansible and by us on localhost; compared: failed, changed, the tree
after (content, mode), and the fields Ansible's copy returns (checksum, md5sum, state, dest, path, size, mode, owner,
group, uid, gid, whether src and backup_file are there), whichever way the file travels (inline, or uploaded when
it is larger than INLINE_LIMIT). Ansible's own lineinfile target reads result.checksum and result.state here."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "library"))
from _ansible_side import registered_by_both  # noqa: E402

from engine.run.actions.files import INLINE_LIMIT  # noqa: E402

SMALL = b"5feac65e line\nsecond\n"
LARGE = b"x" * (INLINE_LIMIT + 10)
FIELDS = ("checksum", "md5sum", "state", "dest", "path", "size", "mode", "owner", "group", "uid", "gid")

# id, the task's copy arguments ("@": the case's folder), whether in check mode; the tree each case starts from
TREE = {"old.txt": (b"old\n", 0o640), "same.txt": (SMALL, 0o600), "big-same.bin": (LARGE, 0o644), "dir/": 0o755}
CASES = [
    ("new", {"src": "small.txt", "dest": "@/new.txt"}, False),
    ("replace-keeps-mode", {"src": "small.txt", "dest": "@/old.txt"}, False),
    ("same-content", {"src": "small.txt", "dest": "@/same.txt"}, False),
    ("same-content-mode", {"src": "small.txt", "dest": "@/same.txt", "mode": "0644"}, False),
    ("into-folder", {"src": "small.txt", "dest": "@/dir"}, False),
    ("into-folder-slash", {"src": "small.txt", "dest": "@/dir/"}, False),
    ("force-false", {"src": "small.txt", "dest": "@/old.txt", "force": False}, False),
    ("backup", {"src": "small.txt", "dest": "@/old.txt", "backup": True}, False),
    ("mode-preserve", {"src": "exec.sh", "dest": "@/new.sh", "mode": "preserve"}, False),
    ("validate", {"src": "small.txt", "dest": "@/old.txt", "validate": "grep -q second %s"}, False),
    ("validate-fails", {"src": "small.txt", "dest": "@/old.txt", "validate": "grep -q nothere %s"}, False),
    ("check-new", {"src": "small.txt", "dest": "@/new.txt"}, True),
    ("large-new", {"src": "big.bin", "dest": "@/big.bin", "mode": "0600"}, False),
    ("large-same", {"src": "big.bin", "dest": "@/big-same.bin"}, False),
    ("large-replace", {"src": "big.bin", "dest": "@/old.txt"}, False),
    ("local-follow-decrypt", {"src": "small.txt", "dest": "@/lf.txt", "local_follow": True, "decrypt": True}, False),
    # a folder: `tree` itself under dest, `tree/` its content; empty folders, directory_mode, kept links
    ("folder-whole", {"src": "tree", "dest": "@/dir", "directory_mode": "0700"}, False),
    ("folder-content", {"src": "tree/", "dest": "@/dir"}, False),
    ("folder-links", {"src": "tree/", "dest": "@/links/", "local_follow": False}, False),
    ("folder-check", {"src": "tree", "dest": "@/dir"}, True),
]


def _build(folder: Path) -> None:
    folder.mkdir(parents=True)
    for rel, what in TREE.items():
        if rel.endswith("/"):
            (folder / rel).mkdir(mode=what)
            continue
        (folder / rel).write_bytes(what[0])
        os.chmod(folder / rel, what[1])


def _source_tree(top: Path) -> None:
    """A control-node folder: files at two levels, an empty folder, a link to a file and one to a folder."""
    (top / "sub" / "deeper").mkdir(parents=True)
    (top / "empty").mkdir()
    for rel in ("a.txt", "sub/b.txt", "sub/deeper/c.txt"):
        (top / rel).write_bytes(rel.encode() + b"\n")
        os.chmod(top / rel, 0o644)
    os.symlink("a.txt", top / "sub" / "link-a")
    os.symlink("../sub/deeper", top / "empty" / "link-dir")
    os.symlink("loop", top / "empty" / "loop")  # a link to itself stays a link (ELOOP)


def _tasks(base: Path) -> list[tuple[str, dict]]:
    out = []
    for cid, args, check in CASES:
        task_args = {k: (str(base / cid) + v[1:] if isinstance(v, str) and v.startswith("@") else v)
                     for k, v in args.items()}
        out.append((cid, {"copy": task_args, "check_mode": check}))
    return out


def _tree(folder: Path) -> dict:
    return {str(p.relative_to(folder)): (os.readlink(p) if p.is_symlink() else oct(stat.S_IMODE(p.stat().st_mode)),
                                         p.read_bytes() if p.is_file() else None)
            for p in sorted(folder.rglob("*")) if ".dfp-staging" not in str(p) and "~" not in p.name}


def _fields(result: dict, folder: Path) -> dict:
    out = {k: str(result[k]).replace(str(folder), "<dir>") for k in FIELDS if k in result}
    out["has_src"] = "src" in result
    out["has_backup"] = "backup_file" in result
    return out


@pytest.fixture(scope="module")
def both(tmp_path_factory) -> dict:
    work = tmp_path_factory.mktemp("copy-src")
    for side in ("ansible", "ourside"):
        files = work / side / "files"
        files.mkdir(parents=True)
        (files / "small.txt").write_bytes(SMALL)
        (files / "big.bin").write_bytes(LARGE)
        (files / "exec.sh").write_bytes(b"#!/bin/sh\n")
        os.chmod(files / "exec.sh", 0o750)
        _source_tree(files / "tree")
        for cid, *_rest in CASES:
            _build(work / side / "t" / cid)
    return registered_by_both(work, _tasks)


@pytest.mark.parametrize("cid", [c[0] for c in CASES])
def test_copy_src_answers_as_ansibles(both, cid):
    theirs, ours, t_dir, o_dir = both[cid]
    assert bool(ours.get("failed")) == bool(theirs.get("failed")), (theirs, json.dumps(ours)[:2000])
    assert _tree(o_dir) == _tree(t_dir)
    if theirs.get("failed"):
        return
    assert ours.get("changed") == theirs.get("changed"), (theirs, ours)
    t_fields, o_fields = _fields(theirs, t_dir), _fields(ours, o_dir)
    assert {k: o_fields.get(k) for k in t_fields} == t_fields, (theirs, ours)


def test_the_comparison_sees_ansibles_fields(both):
    """A guard on the comparison itself: Ansible's answers hold the fields compared above."""
    theirs, ours, _t, _o = both["new"]
    assert {"checksum", "md5sum", "state", "mode", "uid", "size", "src"} <= set(theirs) & set(ours)
    assert both["check-new"][1].get("changed") is True
