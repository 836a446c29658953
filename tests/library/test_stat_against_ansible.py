"""library/stat.py against real ansible-core's ansible.builtin.stat, on the same paths: a tree of a regular file,
an empty, an executable, a setuid and a mode-0 file, a hard link, a folder, a setgid folder, symlinks to a file and
a folder (followed or not), a dangling link, a link loop, a fifo, a socket, /dev/null, an absent path, ~.

Ansible's side is one ansible-playbook run (local connection, this python as the interpreter) with a stat task per
case, registered, then written out as JSON; ours is `python3 -m library.stat ARGS.json` from the repository root,
with the same HOME. Compared: `stat`, key for key and value for value (atime too: every path's atime is set
in the future first, so reading a file for its checksum, or a link, does not move it under relatime), less the
fields Ansible computes that we do not (NOT_COMPUTED, with why: none now; get_mime's `file` and get_attributes'
lsattr run on both sides). changed is false on both. A refusal by both: ours starting with Ansible's words where
it says what is wrong (missing path, a link loop). Where we differ on purpose, DIFFERENCES says what each side does.
The playbook test at the end runs one playbook, written for Ansible (`register: st` then `st.stat.exists`), with
ansible-playbook and with ours.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from _ansible_side import env, python_with_ansible, registered_by_ansible

from tests.helpers import required_ansible_tool

ROOT = Path(__file__).resolve().parents[2]
CONTENT = b"hello\n"

NOT_COMPUTED: dict[str, str] = {}  # Ansible's stat fields ours does not compute (none now; with why)
NO_PROGRAMS = {"get_mime": False, "get_attributes": False}

# id, the arguments ("@NAME": the tree's NAME; a case without path, dest or name stats nothing)
CASES = [
    ("regular-file", {"path": "@file"}),
    ("regular-file-no-mime-no-attributes", {"path": "@file", **NO_PROGRAMS}),
    ("no-checksum", {"path": "@file", "get_checksum": False, **NO_PROGRAMS}),
    *[(f"checksum-{alg}", {"path": "@file", "checksum_algorithm": alg, **NO_PROGRAMS})
      for alg in ("md5", "sha1", "sha224", "sha256", "sha384", "sha512")],
    ("alias-dest-checksum-algo-mime-attr", {"dest": "@file", "checksum_algo": "md5", "mime": False, "attr": False}),
    ("alias-name-checksum-mime-type", {"name": "@file", "checksum": "sha256", "mime_type": False,
                                       "attributes": False}),
    ("alias-mime-dash-type", {"path": "@file", "mime-type": False}),
    ("empty-file", {"path": "@empty", **NO_PROGRAMS}),
    ("executable-file", {"path": "@exec"}),
    ("setuid-file", {"path": "@suid", **NO_PROGRAMS}),
    ("mode-0-file", {"path": "@mode0", **NO_PROGRAMS}),
    ("hard-link", {"path": "@hard", **NO_PROGRAMS}),
    ("directory", {"path": "@dir"}),
    ("directory-no-programs", {"path": "@dir", **NO_PROGRAMS}),
    ("setgid-directory", {"path": "@sgid", **NO_PROGRAMS}),
    ("symlink-to-file", {"path": "@link-file"}),
    ("symlink-to-file-no-programs", {"path": "@link-file", **NO_PROGRAMS}),
    ("symlink-to-file-followed", {"path": "@link-file", "follow": True, **NO_PROGRAMS}),
    ("symlink-to-dir", {"path": "@link-dir", **NO_PROGRAMS}),
    ("symlink-to-dir-followed", {"path": "@link-dir", "follow": True, **NO_PROGRAMS}),
    ("dangling-symlink", {"path": "@dangling", **NO_PROGRAMS}),
    ("dangling-symlink-followed", {"path": "@dangling", "follow": True}),
    ("symlink-loop-not-followed", {"path": "@loop", **NO_PROGRAMS}),
    ("absent", {"path": "@absent"}),
    ("absent-folder", {"path": "@absent/deeper", "follow": True}),
    ("fifo", {"path": "@fifo", **NO_PROGRAMS}),
    ("socket", {"path": "@sock", **NO_PROGRAMS}),
    ("char-device", {"path": "/dev/null", **NO_PROGRAMS}),
    ("tilde", {"path": "~/in-home", **NO_PROGRAMS}),
    ("get-mime-true", {"path": "@file", "get_mime": True}),
    ("mime-alias-true-on-a-script", {"path": "@exec", "mime": True, "get_attributes": False}),
    ("get-attributes-true", {"path": "@file", "get_attributes": True, "get_mime": False}),
    ("programs-on-a-fifo", {"path": "@fifo"}),
    ("programs-on-a-folder", {"path": "@sgid"}),
    # refused by both
    ("no-path", {"follow": True}),
    ("symlink-loop-followed", {"path": "@loop", "follow": True}),
    ("unknown-algorithm", {"path": "@file", "checksum_algorithm": "crc32"}),
    ("checksum-as-a-bool", {"path": "@file", "checksum": True}),  # our old option: Ansible's alias takes a name
]
SAME_WORDS = {"no-path", "symlink-loop-followed"}  # refusals where ours starts with Ansible's msg

# Where we differ on purpose: id, the arguments, what Ansible does, what we do ({"stat": ...}: a success with it;
# {"failed": words}: a failure whose msg holds the words)
DIFFERENCES = [
    # a path under a regular file: Ansible's lstat raises ENOTDIR, which it fails on; ours says nothing is there
    ("path-under-a-file", {"path": "@file/child"}, {"failed": "Not a directory"}, {"stat": {"exists": False}}),
]


def _tree(t: Path, home: Path) -> None:
    """The paths the cases stat; every atime in the future (and after the ctime), so no read moves it."""
    t.mkdir()
    for name, content, mode in (("file", CONTENT, 0o644), ("empty", b"", 0o600), ("exec", b"#!/bin/sh\n", 0o755),
                                ("suid", b"x", 0o4755), ("mode0", b"secret", 0)):
        (t / name).write_bytes(content)
        os.chmod(t / name, mode)
    os.link(t / "exec", t / "hard")
    (t / "dir").mkdir()
    (t / "dir" / "child").write_text("c")
    (t / "sgid").mkdir()
    os.chmod(t / "sgid", 0o2775)
    (t / "link-file").symlink_to("file")
    (t / "link-dir").symlink_to(t / "dir")
    (t / "dangling").symlink_to("gone")
    (t / "loop").symlink_to("loop")
    os.mkfifo(t / "fifo")
    assert len(str(t / "sock")) < 100, "the socket's path is too long for AF_UNIX"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(t / "sock"))
    (home / "in-home").write_bytes(CONTENT)
    future = time.time() + 86400
    for p in [t, *t.rglob("*"), home / "in-home"]:
        os.utime(p, (future, p.lstat().st_mtime), follow_symlinks=False)


def _args(args: dict, t: Path) -> dict:
    return {k: (str(t / v[1:]) if isinstance(v, str) and v.startswith("@") else v) for k, v in args.items()}


def _ours(work: Path, home: Path, cid: str, args: dict) -> dict:
    args_file = work / f"{cid}.args.json"
    args_file.write_text(json.dumps(args))
    proc = subprocess.run([sys.executable, "-m", "library.stat", str(args_file)], capture_output=True, text=True,
                          timeout=60, cwd=ROOT, env=env(home))
    assert proc.stderr == "", proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def both(tmp_path_factory) -> dict:
    """{case id: (Ansible's result, ours)}: one ansible-playbook run for all the cases, then ours one by one."""
    playbook_tool = required_ansible_tool("ansible-playbook")
    work = tmp_path_factory.mktemp("stat-vs-ansible")
    home, t = work / "home", work / "t"
    home.mkdir()
    _tree(t, home)
    every = CASES + [(cid, args) for cid, args, _a, _o in DIFFERENCES]
    theirs = registered_by_ansible(playbook_tool, home, work, [(cid, {"stat": _args(args, t)}) for cid, args in every])
    return {cid: (theirs[cid], _ours(work, home, cid, _args(args, t))) for cid, args in every}


@pytest.mark.parametrize("cid", [c[0] for c in CASES])
def test_stat_returns_what_ansibles_returns(both, cid):
    theirs, ours = both[cid]
    assert bool(ours["failed"]) == bool(theirs.get("failed")), (theirs, ours)
    assert ours["changed"] is False and theirs["changed"] is False
    if theirs.get("failed"):
        assert "stat" not in ours and "stat" not in theirs
        if cid in SAME_WORDS:
            assert ours["msg"].startswith(theirs["msg"]) and len(ours["msg"]) > len(theirs["msg"]), (theirs, ours)
        return
    t_stat, o_stat = theirs["stat"], ours["stat"]
    extra = set(t_stat) - set(o_stat)
    assert extra <= set(NOT_COMPUTED), f"Ansible's fields ours lacks: {sorted(extra - set(NOT_COMPUTED))}"
    args = dict(CASES)[cid]
    if t_stat["exists"] and not {"get_mime", "mime-type", "mime", "mime_type"} & set(args):
        assert {"mimetype", "charset"} <= set(o_stat), "get_mime's default (true) computed nothing"
    if t_stat["exists"] and not {"get_attributes", "attr", "attributes"} & set(args):
        assert {"version", "attributes", "attr_flags"} <= set(o_stat), "get_attributes' default computed nothing"
    assert {k: v for k, v in t_stat.items() if k not in NOT_COMPUTED} == o_stat


@pytest.mark.parametrize("cid, ansible_does, we_do", [(c[0], c[2], c[3]) for c in DIFFERENCES],
                         ids=[c[0] for c in DIFFERENCES])
def test_where_we_differ_on_purpose(both, cid, ansible_does, we_do):
    for result, expected, who in ((both[cid][0], ansible_does, "Ansible"), (both[cid][1], we_do, "ours")):
        if "failed" in expected:
            assert result.get("failed") and expected["failed"] in result["msg"], (
                f"{who}: {result}: compare again and update DIFFERENCES")
        elif isinstance(expected["stat"], str):
            assert not result.get("failed") and expected["stat"] in result["stat"], who
        else:
            assert not result.get("failed") and result["stat"] == expected["stat"], who


def test_the_cases_cover_what_the_brief_names(both):
    """A regular file, a folder, a symlink followed and not, a dangling link, an absent path, a fifo, a setuid
    file, every checksum algorithm: each is a case above, and says what it should."""
    stats = {cid: ours["stat"] for cid, (_t, ours) in both.items() if "stat" in ours}
    assert stats["regular-file"]["isreg"] and stats["regular-file"]["mode"] == "0644"
    assert stats["regular-file"]["checksum"] == hashlib.sha1(CONTENT).hexdigest()  # noqa: S324 - Ansible's default
    assert stats["directory"]["isdir"] and "checksum" not in stats["directory"]
    assert stats["symlink-to-file"]["islnk"] and stats["symlink-to-file"]["lnk_target"] == "file"
    assert not stats["symlink-to-file-followed"]["islnk"] and stats["symlink-to-file-followed"]["isreg"]
    assert stats["dangling-symlink"]["islnk"] and stats["dangling-symlink-followed"] == {"exists": False}
    assert stats["absent"] == {"exists": False}
    assert stats["fifo"]["isfifo"] and stats["socket"]["issock"] and stats["char-device"]["ischr"]
    assert stats["setuid-file"]["isuid"] and stats["setgid-directory"]["isgid"]
    for alg in ("md5", "sha1", "sha224", "sha256", "sha384", "sha512"):
        assert stats[f"checksum-{alg}"]["checksum"] == hashlib.new(alg, CONTENT).hexdigest()
    assert "checksum" not in stats["no-checksum"]
    assert both["alias-name-checksum-mime-type"][1]["sha256"] == hashlib.sha256(CONTENT).hexdigest()


# ---------------------------------------------------------------- one playbook, written for Ansible, run by both

PLAY_TASKS = [
    {"name": "look at the file", "ansible.builtin.stat": {"path": "{{ base }}/f"}, "register": "st"},
    {"name": "look at nothing", "stat": {"path": "{{ base }}/nope", "get_checksum": False}, "register": "missing"},
    {"name": "look at the link", "stat": {"path": "{{ base }}/l", "follow": False, "get_mime": False,
                                          "get_attributes": False, "checksum_algorithm": "sha256"}, "register": "ln"},
    {"name": "what Ansible's users write", "assert": {"that": [
        "st.stat.exists", "st.stat.isreg", "not st.stat.isdir", "st.stat.mode == '0640'", "st.stat.size == 6",
        f"st.stat.checksum == '{hashlib.sha1(CONTENT).hexdigest()}'",  # noqa: S324 - Ansible's default
        "st.stat.pw_name is defined", "st.stat.readable", "not missing.stat.exists", "ln.stat.islnk",
        "ln.stat.lnk_target == 'f'", "ln.stat.lnk_source == base ~ '/f'", "st is not changed"]}},
    {"name": "a when on it", "debug": {"msg": "there"}, "when": "st.stat.exists and not missing.stat.exists",
     "register": "said"},
    {"name": "it ran", "assert": {"that": ["said is not skipped"]}},
]


def test_a_playbook_written_for_ansible_runs_the_same_with_ours(tmp_path):
    from engine.api import run_playbook

    base = tmp_path / "base"
    base.mkdir()
    (base / "f").write_bytes(CONTENT)
    os.chmod(base / "f", 0o640)
    (base / "l").symlink_to("f")
    book = tmp_path / "pb.yaml"
    book.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "vars": {"base": str(base)},
                                     "tasks": PLAY_TASKS}], sort_keys=False))
    playbook_tool = required_ansible_tool("ansible-playbook")
    home = tmp_path / "home"
    home.mkdir()
    proc = subprocess.run(
        [str(playbook_tool), "-i", "localhost,", "-c", "local", "-e",
         f"ansible_python_interpreter={python_with_ansible(playbook_tool)}", "-l", "localhost", str(book)],
        capture_output=True, text=True, timeout=300, cwd=home, env=env(home))
    assert proc.returncode == 0, f"ansible-playbook failed:\n{proc.stdout}\n{proc.stderr}"
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": {"h": {"ansible_connection": "local"}}}}))
    res = run_playbook(str(book), str(inv))
    assert res.exit_code == 0, [(t["task"], t["msg"]) for t in res.tasks if t["status"] == "failed"]
    assert res.registered["h"]["st"]["stat"]["checksum"] == hashlib.sha1(CONTENT).hexdigest()  # noqa: S324
    assert res.recap["h"]["changed"] == 0


def test_get_mime_runs_in_a_playbook(tmp_path):
    from engine.api import run_playbook

    (tmp_path / "f.txt").write_text("plain\n")
    book = tmp_path / "pb.yaml"
    book.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": [
        {"name": "mime", "stat": {"path": str(tmp_path / "f.txt"), "get_mime": True}, "register": "st"},
        {"name": "as Ansible's stat target reads it", "assert": {"that": [
            "st.stat.mimetype == 'text/plain'", "st.stat.charset == 'us-ascii'"]}}]}]))
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": {"h": {"ansible_connection": "local"}}}}))
    res = run_playbook(str(book), str(inv))
    assert res.exit_code == 0, res.tasks
