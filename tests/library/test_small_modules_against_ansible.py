"""ping, tempfile, raw and slurp against real ansible-playbook: the same tasks run by Ansible and by us on localhost
(`ansible_connection: local`), in plain and check mode; compared: failed, changed, skipped, the fields Ansible
returns (ping; tempfile's path, its kind, mode and place, its name's prefix and suffix; raw's rc, stdout, stderr,
their lines; slurp's content, encoding and source, its failures' words), and raw's one-line form."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from _ansible_side import placed, registered_by_ansible, registered_by_ours, same_flags

from tests.helpers import required_ansible_tool

# id, task ("@": the case's folder)
CASES = [
    ("ping", {"ping": None}),
    ("ping-data", {"ping": {"data": "hello"}}),
    ("ping-crash", {"ping": {"data": "crash"}}),
    ("ping-check", {"ping": None, "check_mode": True}),
    ("tempfile-file", {"tempfile": {"path": "@", "prefix": "pre.", "suffix": ".txt"}}),
    ("tempfile-dir", {"tempfile": {"state": "directory", "path": "@", "suffix": "build"}}),
    ("tempfile-bad-prefix", {"tempfile": {"path": "@", "prefix": "a/b"}}),
    ("tempfile-missing-folder", {"tempfile": {"path": "@/nope"}}),
    ("tempfile-check", {"tempfile": {"path": "@"}, "check_mode": True}),
    ("raw", {"raw": "echo out; echo err >&2; printf 'two\\nlines'"}),
    ("raw-executable", {"raw": "echo $0", "args": {"executable": "/bin/bash"}}),
    ("raw-fails", {"raw": "echo before; exit 3"}),
    ("raw-check", {"raw": "touch @/made", "check_mode": True}),
    ("slurp", {"slurp": {"src": "@/data"}}),
    ("slurp-path", {"slurp": {"path": "@/data"}, "check_mode": True}),
    ("slurp-missing", {"slurp": {"src": "@/nope"}}),
    ("slurp-folder", {"slurp": {"src": "@"}}),
]
FIELDS = ("ping", "content", "encoding", "source", "rc", "stdout", "stderr", "stdout_lines", "stderr_lines", "skipped")


def _task(task: dict, folder: Path) -> dict:
    return placed(task, {"@": str(folder)})


def _describe(result: dict, folder: Path) -> dict:
    out = {k: result[k] for k in FIELDS if k in result and k != "msg"}
    path = result.get("path")
    if path:
        p = Path(path)
        out["made"] = (p.parent == folder, stat.S_IMODE(p.stat().st_mode), p.is_dir(), p.name[:4], p.name[-4:])
    return {k: str(v).replace(str(folder), "<dir>") for k, v in out.items()}


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    work = tmp_path_factory.mktemp("small")
    tool = required_ansible_tool("ansible-playbook")
    for side in ("ansible", "ours"):
        for cid, _t in CASES:
            (work / side / cid).mkdir(parents=True)
            (work / side / cid / "data").write_bytes(b"two\nlines \x00\xff")
    (work / "home").mkdir()
    theirs = registered_by_ansible(tool, work / "home", work, [(cid, _task(t, work / "ansible" / cid)) for cid, t in CASES])
    ours = registered_by_ours(work / "ours.yaml", [(cid, _task(t, work / "ours" / cid)) for cid, t in CASES])
    return work, theirs, ours


@pytest.mark.parametrize("cid", [c[0] for c in CASES])
def test_as_ansibles(both, cid):
    work, theirs, ours = both
    t, o = theirs[cid], ours[cid]
    same_flags(t, o, "failed", "skipped", "changed")
    if t.get("failed"):
        if cid.startswith("raw"):
            assert o["msg"] == t["msg"] and o["rc"] == t["rc"] and o["stdout"] == t["stdout"]
        elif cid != "ping-crash":
            assert o["msg"].startswith(t["msg"].split(":")[0]), (t["msg"], o["msg"])
        return
    assert _describe(o, work / "ours" / cid) == _describe(t, work / "ansible" / cid)
    assert sorted(os.listdir(work / "ours" / cid)) == sorted(os.listdir(work / "ansible" / cid)) or cid.startswith(
        "tempfile")
