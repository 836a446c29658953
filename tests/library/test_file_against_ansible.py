"""library/file.py against real ansible-core's ansible.builtin.file: each case gets the same tree twice (a file, an
executable, a folder with a subfolder and a symlink inside, an empty folder, symlinks to a file, a folder and
nothing, two names of one file, a setuid file), Ansible's module works in one (one ansible-playbook run for all the cases), ours
(`python3 -m library.file`) in the other, with the same arguments. Compared: failed, changed, the tree after (kind,
mode, content, link text, link count, owner, mtime), every field Ansible returns (path, dest, src, state, mode, uid,
gid, owner, group, size) with its value, the warnings, and with --diff the diff; a refusal by both, ours starting
with Ansible's words, the tree unchanged. Where we differ on purpose (library/file.py's docstring), DIFFERENCES
says what each side does."""

from __future__ import annotations

import os
import time

import pytest
from _ansible_side import Hard, Link, build, fields, run_ansible, run_ours, scrub, snapshot, warnings_of

ROOT_USER = os.geteuid() == 0
TREE = {
    "file": (b"hello\n", 0o644),
    "exec": (b"#!/bin/sh\n", 0o755),
    "dir/": 0o755,
    "dir/a": (b"a\n", 0o644),
    "dir/sub/": 0o700,
    "dir/sub/b": (b"b\n", 0o600),
    "dir/ln": Link("a"),
    "empty/": 0o755,
    "link-file": Link("file"),
    "link-dir": Link("dir"),
    "dangling": Link("gone"),
    "hard1": (b"h\n", 0o644),
    "hard2": Hard("hard1"),
    "suid": (b"#!/bin/sh\n", 0o4755),
    "binary": (b"\x7fELF\x00\x01", 0o644),
}

# id, the arguments ("@NAME": the case's tree's NAME), flags (check, diff)
CASES = [
    ("absent-file", {"path": "@file", "state": "absent"}, "diff"),
    ("diff-peek-text", {"path": "@file", "_diff_peek": True}, ""),
    ("diff-peek-binary", {"path": "@binary", "_diff_peek": True}, ""),
    ("diff-peek-missing", {"path": "@nope", "_diff_peek": True}, ""),
    ("absent-missing", {"path": "@nope", "state": "absent"}, ""),
    ("absent-link-to-dir-keeps-the-dir", {"path": "@link-dir", "state": "absent"}, ""),
    ("absent-empty-dir", {"path": "@empty", "state": "absent"}, "diff"),
    ("absent-non-empty-dir", {"path": "@dir", "state": "absent"}, "diff"),
    ("absent-check", {"path": "@dir/a", "state": "absent"}, "check"),
    ("directory-nested", {"path": "@new/a/b", "state": "directory"}, "diff"),
    ("directory-new-with-mode", {"path": "@new", "state": "directory", "mode": "0700"}, ""),
    ("directory-there", {"path": "@dir", "state": "directory"}, ""),
    ("directory-mode", {"path": "@dir", "state": "directory", "mode": "0750"}, "diff"),
    ("directory-mode-as-yaml-number", {"path": "@dir", "state": "directory", "mode": 0o700}, ""),
    ("directory-mode-symbolic", {"path": "@dir", "state": "directory", "mode": "u=rwx,g=rx,o="}, ""),
    ("directory-recurse", {"path": "@dir", "state": "directory", "recurse": True, "mode": "u=rwX,g=rX,o="}, ""),
    ("recurse-means-directory", {"path": "@new", "recurse": True}, ""),
    ("directory-through-link", {"path": "@link-dir", "state": "directory", "mode": "0711"}, ""),
    ("directory-check", {"path": "@new/c", "state": "directory", "mode": "0700"}, "check,diff"),
    ("file-there", {"path": "@file"}, ""),
    ("file-mode", {"path": "@file", "state": "file", "mode": "0600"}, "diff"),
    ("file-mode-symbolic", {"name": "@file", "mode": "u+x,g-r"}, ""),
    ("file-through-link", {"dest": "@link-file", "state": "file", "mode": "0640"}, ""),
    ("file-hard-link", {"path": "@hard1", "state": "file"}, "diff"),
    ("file-mtime", {"path": "@file", "state": "file", "modification_time": "202001020304.05"}, "diff"),
    ("file-atime-format", {"path": "@file", "state": "file", "access_time": "2021-05-06 07:08",
                           "access_time_format": "%Y-%m-%d %H:%M"}, ""),
    ("file-times-preserve", {"path": "@file", "modification_time": "preserve", "access_time": "preserve"}, ""),
    ("file-check", {"path": "@file", "mode": "0600"}, "check,diff"),
    ("state-of-a-folder-there", {"path": "@dir", "mode": "0755"}, ""),
    ("touch-new", {"path": "@new-file", "state": "touch"}, ""),
    ("touch-new-mode", {"path": "@new-file", "state": "touch", "mode": "0600"}, ""),
    ("touch-existing", {"path": "@file", "state": "touch"}, ""),
    ("touch-preserve", {"path": "@file", "state": "touch", "modification_time": "preserve",
                        "access_time": "preserve"}, "diff"),
    ("touch-check", {"path": "@new-file", "state": "touch"}, "check"),
    ("link-new", {"path": "@l", "state": "link", "src": "file"}, "diff"),
    ("link-there", {"path": "@link-file", "state": "link", "src": "file"}, ""),
    ("link-retarget", {"path": "@link-file", "state": "link", "src": "exec"}, "diff"),
    ("link-absolute-src", {"path": "@dir/l", "state": "link", "src": "@exec"}, ""),
    ("link-src-missing-force", {"path": "@l", "state": "link", "src": "nope", "force": True}, ""),
    ("link-over-file-force", {"path": "@file", "state": "link", "src": "exec", "force": True}, ""),
    ("link-over-empty-dir-force", {"path": "@empty", "state": "link", "src": "file", "force": True}, ""),
    ("link-mode-goes-to-target", {"path": "@l", "state": "link", "src": "file", "mode": "0600"}, ""),
    ("link-check", {"path": "@l", "state": "link", "src": "file"}, "check"),
    ("link-state-there", {"path": "@link-file"}, ""),
    ("hard-new", {"path": "@h", "state": "hard", "src": "@file"}, ""),
    ("hard-there", {"path": "@hard2", "state": "hard", "src": "@hard1"}, ""),
    ("hard-over-file-force", {"path": "@exec", "state": "hard", "src": "@file", "force": True}, ""),
    ("hard-into-a-folder", {"path": "@empty", "state": "hard", "src": "@file"}, ""),
    # refused by both
    ("file-missing", {"path": "@nope", "state": "file"}, ""),
    ("file-on-dir", {"path": "@dir", "state": "file"}, ""),
    ("file-link-not-followed", {"path": "@link-file", "state": "file", "follow": False}, ""),
    ("file-dangling-link", {"path": "@dangling", "state": "file"}, ""),
    ("default-state-missing", {"path": "@nope"}, ""),
    ("directory-on-file", {"path": "@file", "state": "directory"}, ""),
    ("directory-under-file", {"path": "@file/sub", "state": "directory"}, ""),
    ("bad-time", {"path": "@file", "modification_time": "yesterday"}, ""),
    ("bad-mode", {"path": "@file", "mode": "u+q"}, ""),
    ("touch-missing-folder", {"path": "@no/f", "state": "touch"}, ""),
    ("link-src-missing", {"path": "@l", "state": "link", "src": "nope"}, ""),
    ("link-over-file", {"path": "@file", "state": "link", "src": "exec"}, ""),
    ("link-over-dir", {"path": "@empty", "state": "link", "src": "file"}, ""),
    ("link-over-full-dir-force", {"path": "@dir", "state": "link", "src": "file", "force": True}, ""),
    ("link-without-src", {"path": "@l", "state": "link"}, ""),
    ("hard-without-src", {"path": "@h", "state": "hard"}, ""),
    ("hard-src-missing", {"path": "@h", "state": "hard", "src": "@nope"}, ""),
    ("hard-over-file", {"path": "@exec", "state": "hard", "src": "@file"}, ""),
    ("hard-other-link-there", {"path": "@hard2", "state": "hard", "src": "@file"}, ""),
    ("recurse-without-directory", {"path": "@file", "state": "file", "recurse": True}, ""),
    ("src-without-link", {"path": "@dir", "state": "directory", "src": "@file"}, ""),
    ("no-path", {"state": "directory"}, ""),
    ("unknown-owner", {"path": "@file", "owner": "dfp-no-such-user"}, ""),
    ("unknown-group", {"path": "@file", "group": "dfp-no-such-group"}, ""),
]
if ROOT_USER:  # changing an owner needs root
    CASES += [
        ("owner-and-group", {"path": "@file", "owner": "65534", "group": "65534"}, "diff"),
        ("owner-by-name-recurse", {"path": "@dir", "state": "directory", "owner": "nobody", "recurse": True}, ""),
        ("owner-of-a-link-itself", {"path": "@link-file", "state": "link", "owner": "65534", "follow": False}, ""),
        # the chown clears the setuid bit the mode keeps: set again (Ansible reads the mode anew after the chown)
        ("owner-of-a-setuid-file-keeps-its-mode", {"path": "@suid", "owner": "65534", "mode": "04755"}, "diff"),
        ("unknown-owner-check-mode-new", {"path": "@new", "state": "directory", "owner": "dfp-no-such-user"},
         "check"),
    ]

# refusals where Ansible's msg ends in the exception's text (bytes paths, errno): ours starts with its words up to here
WORDS_UP_TO = {"directory-under-file": "as requested: ", "bad-time": "using format %Y%m%d%H%M.%S: ",
               "touch-missing-folder": "could not touch target."}

# Where we differ on purpose: id, the arguments, what Ansible does, what we do: FAILED (a refusal, the tree as it
# was) or {path: mode as octal text, or None for absent}
FAILED = "failed"
DIFFERENCES = [
    # recurse beside absent is accepted (Ansible refuses it); the folder goes with its contents either way
    ("absent-recurse", {"path": "@dir", "state": "absent", "recurse": True}, FAILED, {"dir": None}),
    # the mode goes to the last folder created (Ansible gives it to every folder it creates)
    ("directory-nested-with-mode", {"path": "@new/a", "state": "directory", "mode": "0700"},
     {"new": "0o700", "new/a": "0o700"}, {"new": "0o755", "new/a": "0o700"}),
]
DIFF_TREE = {**TREE, "dir/out": Link("../exec")}
# recurse with follow (Ansible's default) sets a link's target outside the folder too; without follow not
LINKED_CASES = [
    ("recurse-link-out-of-the-folder", {"path": "@dir", "state": "directory", "recurse": True, "mode": "0700"}, ""),
    ("recurse-link-out-no-follow", {"path": "@dir", "state": "directory", "recurse": True, "mode": "0700",
                                    "follow": False}, ""),
]
CASES += LINKED_CASES


def _args(args: dict, folder) -> dict:
    def point(v):
        return str(folder / "t" / v[1:]) if isinstance(v, str) and v.startswith("@") else v
    return {k: point(v) for k, v in args.items()}


@pytest.fixture(scope="module")
def both(tmp_path_factory) -> dict:
    """{case id: (Ansible's result, ours, Ansible's folder, ours, the tree before)}."""
    work = tmp_path_factory.mktemp("file-vs-ansible")
    every = CASES + [(cid, args, "") for cid, args, _a, _o in DIFFERENCES]
    linked = {d[0] for d in DIFFERENCES} | {c[0] for c in LINKED_CASES}
    trees = {cid: DIFF_TREE if cid in linked else TREE for cid, _a, _f in every}
    for side in ("ansible", "ourside"):  # names of one length: a link's size is its text's
        for cid, *_rest in every:
            build(work / side / cid / "t", trees[cid])
    for name, tree in (("tree", TREE), ("diff-tree", DIFF_TREE)):
        build(work / "pristine" / name, tree)
    pristine = {cid: snapshot(work / "pristine" / ("diff-tree" if trees[cid] is DIFF_TREE else "tree"), 0)
                for cid, _a, _f in every}
    theirs, printed = run_ansible(work, "file", [(cid, _args(args, work / "ansible" / cid), flags) for cid, args, flags in every])
    out: dict = {"ansible's output": printed}
    for cid, args, flags in every:
        ours = run_ours("file", work, cid, _args(args, work / "ourside" / cid), flags)
        out[cid] = (theirs[cid], ours, work / "ansible" / cid, work / "ourside" / cid, pristine[cid])
    return out


@pytest.mark.parametrize("cid, flags", [(c[0], c[2]) for c in CASES], ids=[c[0] for c in CASES])
def test_file_does_what_ansibles_does(both, cid, flags):
    theirs, ours, t_dir, o_dir, before = both[cid]
    now = time.time()
    assert bool(ours["failed"]) == bool(theirs.get("failed")), (theirs, ours)
    assert snapshot(o_dir / "t", now) == snapshot(t_dir / "t", now)
    for warning in warnings_of(ours):  # Ansible's registered results hold none: its controller printed them
        assert f"[WARNING]: {warning}" in " ".join(both["ansible's output"].split()), warning
    if theirs.get("failed"):
        t_msg, o_msg = scrub(theirs["msg"], t_dir, now), scrub(ours["msg"], o_dir, now)
        t_msg = t_msg[:len(t_msg) if cid not in WORDS_UP_TO else t_msg.index(WORDS_UP_TO[cid]) + len(WORDS_UP_TO[cid])]
        assert o_msg.startswith(t_msg), (t_msg, o_msg)
        if cid not in ("directory-under-file",):  # Ansible's mkdir fails after nothing was made either
            assert snapshot(o_dir / "t", 0) == before
        return
    assert ours["changed"] == theirs["changed"], (theirs, ours)
    t_fields, o_fields = scrub(fields(theirs), t_dir, now), scrub(fields(ours), o_dir, now)
    assert {k: o_fields.get(k) for k in t_fields} == t_fields, (theirs, ours)
    if "diff" in flags:
        assert scrub(ours.get("diff"), o_dir, now) == scrub(theirs.get("diff"), t_dir, now)


@pytest.mark.parametrize("cid, ansible_does, we_do", [(c[0], c[2], c[3]) for c in DIFFERENCES],
                         ids=[c[0] for c in DIFFERENCES])
def test_where_we_differ_on_purpose(both, cid, ansible_does, we_do):
    theirs, ours, t_dir, o_dir, before = both[cid]
    for result, folder, expected, who in ((theirs, t_dir, ansible_does, "Ansible"), (ours, o_dir, we_do, "ours")):
        if expected == FAILED:
            assert result.get("failed"), f"{who}: {result}: compare again and update DIFFERENCES"
            assert snapshot(folder / "t", 0) == before, who
            continue
        assert not result.get("failed"), f"{who}: {result.get('msg')}: compare again and update DIFFERENCES"
        for rel, mode in expected.items():
            path = folder / "t" / rel
            got = None if not os.path.lexists(path) else oct(os.lstat(path).st_mode & 0o7777)
            assert got == mode, f"{who}: {rel} is {got}: compare again and update DIFFERENCES"


def test_a_symbolic_mode_matches_ansibles_arithmetic():
    """dflash_host/host/fileattrs.py's symbolic_mode against module_utils' _symbolic_mode_to_octal, on many modes."""
    import stat

    from ansible.module_utils.basic import AnsibleModule

    from dflash_host.host.fileattrs import symbolic_mode

    class St:
        def __init__(self, mode):
            self.st_mode = mode

    specs = ["u+rw", "u=rwX,g=rX,o=", "a+x", "+x", "o-rwx", "g=u", "u+s,g+s,+t", "=r", "u=g,o=u", "a=rwx,o-w",
             "ug+X", "go-w,u+X", "u-x+X", "-w", "u="]
    for prev in (0o644, 0o755, 0o600, 0o4711, 0, 0o1777):
        for is_dir in (False, True):
            st = St((stat.S_IFDIR if is_dir else stat.S_IFREG) | prev)
            for spec in specs:
                assert symbolic_mode(prev, is_dir, spec) == AnsibleModule._symbolic_mode_to_octal(st, spec), spec
