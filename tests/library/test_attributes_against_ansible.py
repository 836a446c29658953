"""`attributes` of file and copy, and stat's get_attributes, against real ansible-core on the same files: chattr's
+A, =A, -A, a letter already there; compared: failed, changed, the flags lsattr reads after. Skipped where this
filesystem has no attributes (lsattr fails on it)."""

from __future__ import annotations

import subprocess

import pytest
from _ansible_side import registered_by_ansible, run_ours

from dflash_host.host import attributes
from tests.helpers import required_ansible_tool

# id, module, arguments ("@": the case's file), the file's flags before (chattr's letters)
CASES = [
    ("file-add", "file", {"path": "@", "attributes": "+A"}, ""),
    ("file-add-there", "file", {"path": "@", "attributes": "+A"}, "A"),
    ("file-exactly", "file", {"path": "@", "attr": "A"}, ""),  # "=A": Ansible runs `chattr ==A` (fails); ours =A
    ("file-remove", "file", {"path": "@", "attributes": "-A"}, "A"),
    ("file-check", "file", {"path": "@", "attributes": "+A", "_check": True}, ""),
    ("copy-new-content", "copy", {"dest": "@", "content": "new\n", "attributes": "+A"}, ""),
    ("copy-same-content", "copy", {"dest": "@", "content": "x\n", "attributes": "+A"}, ""),
    ("copy-same-content-there", "copy", {"dest": "@", "content": "x\n", "attributes": "+A"}, "A"),
]


def _flags(path) -> str:
    return attributes.read(str(path), with_version=False).get("attr_flags", "")


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    work = tmp_path_factory.mktemp("attrs")
    probe = work / "probe"
    probe.write_text("x\n")
    if subprocess.run(["chattr", "+A", str(probe)], capture_output=True).returncode != 0:
        pytest.skip("this filesystem (or user) has no file attributes")
    tool = required_ansible_tool("ansible-playbook")
    (work / "ansible-home").mkdir()
    for side in ("ansible", "ours"):
        for cid, _m, _a, before in CASES:
            f = work / side / cid
            f.parent.mkdir(exist_ok=True)
            f.write_text("x\n")
            if before:
                subprocess.run(["chattr", "+" + before, str(f)], check=True)

    def point(args, side, cid):
        return {k: str(work / side / cid) if v == "@" else v for k, v in args.items() if k != "_check"}

    theirs = registered_by_ansible(tool, work / "ansible-home", work, [
        (cid, {m: point(a, "ansible", cid), "check_mode": bool(a.get("_check"))}) for cid, m, a, _b in CASES])
    ours = {cid: run_ours(m, work, cid, point(a, "ours", cid), "check" if a.get("_check") else "")
            for cid, m, a, _b in CASES}
    return work, theirs, ours


@pytest.mark.parametrize("cid", [c[0] for c in CASES])
def test_attributes_as_ansibles(both, cid):
    work, theirs, ours = both
    assert bool(ours[cid].get("failed")) == bool(theirs[cid].get("failed")), (theirs[cid], ours[cid])
    assert ours[cid]["changed"] == theirs[cid]["changed"], (theirs[cid], ours[cid])
    assert _flags(work / "ours" / cid) == _flags(work / "ansible" / cid)
