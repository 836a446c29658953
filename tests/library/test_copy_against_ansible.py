"""library/copy.py (one file: content, or remote_src's src on the host) against real ansible-core's
ansible.builtin.copy, its action plugin included: each case gets the same tree twice (a file, a file already
holding the content, a symlink to a file, a folder, files to copy on the host), Ansible's copy works in one (one
ansible-playbook run for all the cases), ours (`python3 -m library.copy`) in the other, with the same arguments.
A folder as remote_src's src is merged into dest as Ansible's. Compared: failed, changed, the tree after (kind, mode, content, link text, owner, mtime; a backup by Ansible's
name pattern), every field Ansible returns (dest, path, checksum, md5sum, src with remote_src, state, mode, uid,
gid, owner, group, size, backup_file) with its value, and with --diff the diff; a refusal by both, ours starting
with Ansible's words, the tree unchanged. Where we differ on purpose (library/copy.py's docstring), DIFFERENCES
says what each side does.

Copy with `src:` on the control node is the engine's (engine/run/actions/files.py; tests/engine/run/test_general_modules_play.py).
"""

from __future__ import annotations

import hashlib
import os
import re
import time

import pytest
from _ansible_side import Link, build, fields, run_ansible, run_ours, scrub, snapshot

ROOT_USER = os.geteuid() == 0
BACKUP = re.compile(r"\.\d+\.\d{4}-\d\d-\d\d@\d\d:\d\d:\d\d~$")  # module_utils' backup_local
NEW = "new\n"
TREE = {
    "old.txt": (b"old\n", 0o640),
    "same.txt": (NEW.encode(), 0o600),
    "link.txt": Link("old.txt"),
    "dir/": 0o755,
    "dir/in.txt": (b"in\n", 0o640),
    "dir2/": 0o700,
    "dir2/in.txt": (b"other\n", 0o600),
    "src.txt": (b"from the host\n", 0o750),
    "src-same.txt": (NEW.encode(), 0o644),
    "links/": 0o755,
    "links/f.txt": (b"f\n", 0o644),
    "links/to-f": Link("f.txt"),
    "links/to-dir": Link("../dir2"),
    "links/dangling": Link("nowhere"),
}

# id, the arguments ("@NAME": the case's tree's NAME), flags (check, diff)
CASES = [
    ("create", {"dest": "@new.txt", "content": NEW}, "diff"),
    ("create-with-mode", {"dest": "@new.txt", "content": NEW, "mode": "0600"}, ""),
    ("replace-keeps-the-mode", {"dest": "@old.txt", "content": NEW}, "diff"),
    ("content-there", {"dest": "@same.txt", "content": NEW}, ""),
    ("content-there-mode-differs", {"dest": "@same.txt", "content": NEW, "mode": "0644"}, "diff"),
    ("mode-as-yaml-number", {"dest": "@old.txt", "content": NEW, "mode": 0o600}, ""),
    ("mode-symbolic", {"dest": "@old.txt", "content": NEW, "mode": "u+x,o+r"}, ""),
    ("backup", {"dest": "@old.txt", "content": NEW, "backup": True}, ""),
    ("backup-content-there", {"dest": "@same.txt", "content": NEW, "backup": True}, ""),
    ("force-false-dest-there", {"dest": "@old.txt", "content": NEW, "force": False, "mode": "0600"}, ""),
    ("force-false-new", {"dest": "@new.txt", "content": NEW, "force": False}, ""),
    ("symlink-replaced-by-the-file", {"dest": "@link.txt", "content": NEW}, "diff"),
    ("symlink-with-the-content-replaced", {"dest": "@link.txt", "content": "old\n"}, ""),
    ("symlink-followed", {"dest": "@link.txt", "content": NEW, "follow": True}, ""),
    ("symlink-followed-content-there", {"dest": "@link.txt", "content": "old\n", "follow": True, "mode": "0600"}, ""),
    ("validate-passes", {"dest": "@old.txt", "content": NEW, "validate": "grep -q new %s"}, ""),
    ("checksum-matches", {"dest": "@new.txt", "content": NEW, "checksum": hashlib.sha1(NEW.encode()).hexdigest()},  # noqa: S324
     ""),
    ("json-content", {"dest": "@data.json", "content": {"a": [1, "b"], "c": None}}, ""),
    ("empty-content", {"dest": "@empty", "content": ""}, ""),
    ("check-create", {"dest": "@new.txt", "content": NEW}, "check,diff"),
    ("check-replace", {"dest": "@old.txt", "content": NEW, "mode": "0600"}, "check,diff"),
    ("check-mode-only", {"dest": "@same.txt", "content": NEW, "mode": "0644"}, "check"),
    ("remote-src-create", {"dest": "@copy.txt", "src": "@src.txt", "remote_src": True}, ""),
    ("remote-src-replace", {"dest": "@old.txt", "src": "@src.txt", "remote_src": True}, ""),
    ("remote-src-there", {"dest": "@same.txt", "src": "@src-same.txt", "remote_src": True, "mode": "0640"}, ""),
    ("remote-src-into-a-folder", {"dest": "@dir", "src": "@src.txt", "remote_src": True}, ""),
    ("remote-src-mode-preserve", {"dest": "@new.txt", "src": "@src.txt", "remote_src": True, "mode": "preserve"}, ""),
    ("remote-src-check", {"dest": "@new.txt", "src": "@src.txt", "remote_src": True}, "check"),
    # a folder on the host: `dir` itself under dest, `dir/` its content, merged into what is there
    ("remote-src-folder", {"dest": "@copy", "src": "@dir", "remote_src": True}, ""),
    ("remote-src-folder-content", {"dest": "@copy/", "src": "@dir/", "remote_src": True}, ""),
    ("remote-src-folder-into-one", {"dest": "@dir2", "src": "@dir/", "remote_src": True}, ""),
    ("remote-src-folder-check", {"dest": "@copy", "src": "@dir", "remote_src": True}, "check"),
    # links in a folder from the host: kept when copied whole; merged per local_follow (not given, true, false)
    ("remote-src-folder-links", {"dest": "@copy", "src": "@links", "remote_src": True}, ""),
    ("remote-src-folder-links-merge", {"dest": "@dir", "src": "@links/", "remote_src": True}, ""),
    ("remote-src-folder-links-merge-follow", {"dest": "@dir", "src": "@links/", "remote_src": True,
                                              "local_follow": True}, ""),
    ("remote-src-folder-links-merge-no-follow", {"dest": "@dir", "src": "@links/", "remote_src": True,
                                                 "local_follow": False}, ""),
    # refused by both
    ("content-into-a-folder", {"dest": "@dir", "content": "x"}, ""),
    ("content-dest-ends-in-slash", {"dest": "@dir/", "content": "x"}, ""),
    ("no-content", {"dest": "@new.txt"}, ""),
    ("content-and-src", {"dest": "@new.txt", "content": "x", "src": "@src.txt", "remote_src": True}, ""),
    ("validate-fails", {"dest": "@old.txt", "content": NEW, "validate": "grep -q nothere %s"}, ""),
    ("checksum-differs", {"dest": "@new.txt", "content": NEW, "checksum": "0" * 40}, ""),
    ("remote-src-missing", {"dest": "@new.txt", "src": "@nope", "remote_src": True}, ""),
    # a missing folder: made for a dest ending in /, else "Destination directory ... does not exist"
    ("missing-folders", {"dest": "@no/such/f.txt", "content": "x"}, ""),
    ("missing-folders-slash", {"dest": "@no/such/", "src": "@src.txt", "remote_src": True}, ""),
    ("missing-folders-slash-check", {"dest": "@no/such/", "src": "@src.txt", "remote_src": True}, "check"),
]
if ROOT_USER:  # changing an owner needs root
    CASES += [
        ("owner-and-group", {"dest": "@old.txt", "content": NEW, "owner": "65534", "group": "65534"}, ""),
        ("owner-content-there", {"dest": "@same.txt", "content": NEW, "owner": "nobody"}, "diff"),
    ]

# Where we differ on purpose: id, the arguments, what Ansible does, what we do: FAILED (a refusal, the tree as it
# was) or {path: mode as octal text, or None for absent}
FAILED = "failed"
DIFFERENCES = [
    # validate without %s is refused before anything is compared (Ansible: only when it would write)
    ("validate-without-placeholder", {"dest": "@same.txt", "content": NEW, "validate": "true"},
     {"same.txt": "0o600"}, FAILED),
    # mode preserve needs a src (Ansible takes its temp file's 0600 for content)
    ("mode-preserve-with-content", {"dest": "@new.txt", "content": "x", "mode": "preserve"}, {"new.txt": "0o600"},
     FAILED),
    # remote_src with validate: Ansible sets the task's mode on src itself to validate it; ours validates the copy
    ("remote-src-validate-mode", {"dest": "@new.txt", "src": "@src.txt", "remote_src": True, "mode": "0600",
                                  "validate": "test -s %s"}, {"src.txt": "0o600", "new.txt": "0o600"},
     {"src.txt": "0o750", "new.txt": "0o600"}),
]
WORDS_UP_TO = {"validate-fails": "failed to validate", "remote-src-missing": "not found",
               "missing-folders": "Destination directory"}


def _args(args: dict, folder) -> dict:
    def point(v):
        if isinstance(v, str) and v.startswith("@"):
            return str(folder / "t" / v[1:]) + ("/" if v.endswith("/") else "")
        return v
    return {k: point(v) for k, v in args.items()}


def tree_after(folder, now: float) -> dict:
    """The tree, a backup named BACKUP (its name holds a PID and the time)."""
    return {BACKUP.sub(".BACKUP", k): v for k, v in snapshot(folder / "t", now).items()}


@pytest.fixture(scope="module")
def both(tmp_path_factory) -> dict:
    """{case id: (Ansible's result, ours, Ansible's folder, ours, the tree before)}."""
    work = tmp_path_factory.mktemp("copy-vs-ansible")
    every = CASES + [(cid, args, "") for cid, args, _a, _o in DIFFERENCES]
    for side in ("ansible", "ourside"):  # names of one length: a link's size is its text's
        for cid, *_rest in every:
            build(work / side / cid / "t", TREE)
    build(work / "pristine" / "t", TREE)
    before = tree_after(work / "pristine", 0)
    theirs, _printed = run_ansible(work, "copy", [(cid, _args(a, work / "ansible" / cid), f) for cid, a, f in every])
    out = {}
    for cid, args, flags in every:
        ours = run_ours("copy", work, cid, _args(args, work / "ourside" / cid), flags)
        out[cid] = (theirs[cid], ours, work / "ansible" / cid, work / "ourside" / cid, before)
    return out


def _diff(result: dict):
    """Ansible's copy diff is a list of one {before, after, ...} (its file module's a dict); ours the dict."""
    diff = result.get("diff")
    return (diff[0] if diff else None) if isinstance(diff, list) else diff


@pytest.mark.parametrize("cid, args, flags", CASES, ids=[c[0] for c in CASES])
def test_copy_does_what_ansibles_does(both, cid, args, flags):
    theirs, ours, t_dir, o_dir, before = both[cid]
    now = time.time()
    assert bool(ours["failed"]) == bool(theirs.get("failed")), (theirs, ours)
    assert tree_after(o_dir, now) == tree_after(t_dir, now)
    if theirs.get("failed"):
        t_msg, o_msg = scrub(theirs["msg"], t_dir, now), scrub(ours["msg"], o_dir, now)
        if cid in WORDS_UP_TO:
            t_msg = t_msg[:t_msg.index(WORDS_UP_TO[cid]) + len(WORDS_UP_TO[cid])]
        assert o_msg.startswith(t_msg), (t_msg, o_msg)
        assert tree_after(o_dir, 0) == before
        return
    assert ours["changed"] == theirs["changed"], (theirs, ours)
    t_fields, o_fields = scrub(fields(theirs), t_dir, now), scrub(fields(ours), o_dir, now)
    if "content" in args:  # Ansible's src names the temp file its action plugin made (gone when the task ended)
        t_fields.pop("src", None)
    for f in (t_fields, o_fields):
        if "backup_file" in f:
            assert BACKUP.search(f["backup_file"]), f
            f["backup_file"] = BACKUP.sub(".BACKUP", f["backup_file"])
    assert {k: o_fields.get(k) for k in t_fields} == t_fields, (theirs, ours)
    if "diff" in flags:
        assert scrub(_diff(ours), o_dir, now) == scrub(_diff(theirs), t_dir, now)


@pytest.mark.parametrize("cid, ansible_does, we_do", [(c[0], c[2], c[3]) for c in DIFFERENCES],
                         ids=[c[0] for c in DIFFERENCES])
def test_where_we_differ_on_purpose(both, cid, ansible_does, we_do):
    theirs, ours, t_dir, o_dir, before = both[cid]
    for result, folder, expected, who in ((theirs, t_dir, ansible_does, "Ansible"), (ours, o_dir, we_do, "ours")):
        if expected == FAILED:
            assert result.get("failed"), f"{who}: {result}: compare again and update DIFFERENCES"
            assert tree_after(folder, 0) == before, who
            continue
        assert not result.get("failed"), f"{who}: {result.get('msg')}: compare again and update DIFFERENCES"
        for rel, mode in expected.items():
            path = folder / "t" / rel
            got = None if not os.path.lexists(path) else oct(os.lstat(path).st_mode & 0o7777)
            assert got == mode, f"{who}: {rel} is {got}: compare again and update DIFFERENCES"
