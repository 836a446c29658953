"""library/lineinfile.py against real ansible-core's ansible.builtin.lineinfile: each case's file (the same bytes)
is copied into two folders, Ansible's module edits one, ours (`python3 -m library.lineinfile`) the other, with
the same arguments: the same bytes after, the same changed, msg, backup (present or not, Ansible's name, the old
bytes in it), found, warnings, diff and mode; a refusal by both, ours starting with Ansible's words.

Ansible's module runs as ansible-playbook would run it on the host (`python -m ansible.modules.lineinfile ARGS`,
the arguments file holding ANSIBLE_MODULE_ARGS with _ansible_check_mode / _ansible_diff), with a HOME of its own;
a few cases go through the `ansible` command itself as well, to show that running the module so is the same.
Where we differ on purpose (library/lineinfile.py's docstring), DIFFERENCES says what each side does."""

from __future__ import annotations

import grp
import json
import os
import pwd
import re
import subprocess
from pathlib import Path

import pytest
from _helpers import run_by_hand

from tests.helpers import required_ansible_tool

ME, MY_GROUP = pwd.getpwuid(os.getuid()).pw_name, grp.getgrgid(os.getgid()).gr_name
BACKUP_NAME = re.compile(r"^f\.\d+\.\d{4}-\d\d-\d\d@\d\d:\d\d:\d\d~$")  # module_utils' backup_local

# id, the file before (None: no file), the arguments (path added unless an alias names it), flags
CASES = [
    ("add-at-eof", b"a\nb\n", {"line": "c"}, ""),
    ("already-there", b"a\nb\n", {"line": "b"}, ""),
    ("no-newline-at-eof", b"a\nb", {"line": "c"}, ""),
    ("exact-line-last-without-newline", b"a\nc", {"line": "c"}, ""),
    ("empty-file", b"", {"line": "c"}, ""),
    ("regexp-replaces", b"PORT=1\nX=2\n", {"regexp": "^PORT=", "line": "PORT=8000"}, "diff"),
    ("regexp-same-line", b"PORT=8000\nX=2\n", {"regexp": "^PORT=", "line": "PORT=8000"}, ""),
    ("regexp-last-of-duplicates", b"P=1\nx\nP=2\n", {"regexp": "^P=", "line": "P=3"}, ""),
    ("regexp-firstmatch", b"P=1\nx\nP=2\n", {"regexp": "^P=", "line": "P=3", "firstmatch": True}, ""),
    ("regexp-no-match-adds", b"X=2\n", {"regexp": "^PORT=", "line": "PORT=8000"}, ""),
    ("regexp-no-match-exact-there", b"X=2\nexport A=1\n", {"regexp": "^A=", "line": "export A=1"}, ""),
    ("regexp-sees-the-newline", b"k=1\nk=2\n", {"regexp": "=1\\n", "line": "k=9"}, ""),
    ("regex-alias", b"PORT=1\n", {"regex": "^PORT", "line": "PORT=2"}, ""),
    ("value-alias-dest-alias", b"a\n", {"dest": "@", "value": "b"}, ""),
    ("destfile-alias", b"a\n", {"destfile": "@", "line": "b"}, ""),
    ("name-alias", b"a\n", {"name": "@", "line": "b"}, ""),
    ("insertafter-regex", b"[a]\nk=1\n[b]\nk=2\n", {"line": "new=1", "insertafter": "^\\[a\\]"}, ""),
    ("insertafter-last-of-matches", b"#x\na\n#x\nb\n", {"line": "L", "insertafter": "^#x"}, ""),
    ("insertafter-firstmatch", b"#x\na\n#x\nb\n", {"line": "L", "insertafter": "^#x", "firstmatch": True}, ""),
    ("insertafter-no-match-goes-to-eof", b"x\n", {"line": "new", "insertafter": "^\\[nomatch\\]"}, ""),
    ("insertafter-next-line-is-it", b"#x\nL\nb\n", {"line": "L", "insertafter": "^#x", "firstmatch": True}, ""),
    ("insertafter-but-exact-line-elsewhere", b"x\n#m\ny\n", {"line": "x", "insertafter": "^#m"}, ""),
    ("insertbefore-search-string-no-match", b"a\nm\n", {"search_string": "zz", "line": "L", "insertbefore": "^m"}, ""),
    ("regexp-firstmatch-insertbefore", b"a\nm\nm\n", {"regexp": "^zz", "line": "L", "insertbefore": "^m",
                                                       "firstmatch": True}, ""),
    ("insertafter-eof", b"a\n", {"line": "b", "insertafter": "EOF"}, ""),
    ("insertafter-bof", b"a\n", {"line": "b", "insertafter": "BOF"}, ""),
    ("insertafter-last-line", b"a\nmark\n", {"line": "L", "insertafter": "^mark"}, ""),
    ("insertbefore-regex", b"a\nmark\nb\n", {"line": "L", "insertbefore": "^mark"}, ""),
    ("insertbefore-first-line", b"mark\nb\n", {"line": "L", "insertbefore": "^mark"}, ""),
    ("insertbefore-firstmatch", b"m\nx\nm\n", {"line": "L", "insertbefore": "^m", "firstmatch": True}, ""),
    ("insertbefore-bof", b"a\n", {"line": "b", "insertbefore": "BOF"}, ""),
    ("insertbefore-no-match", b"a\n", {"line": "b", "insertbefore": "^zzz"}, ""),
    ("regexp-wins-over-insertafter", b"[a]\nK=1\n", {"regexp": "^K=", "line": "K=2", "insertafter": "^\\[a\\]"}, ""),
    ("backrefs-groups", b"-Xms128m -Xmx1g\n",
     {"regexp": "^(.*)Xms(\\d+)m(.*)$", "line": "\\1Xms512m\\3", "backrefs": True}, ""),
    ("backrefs-named-group", b"user=bob\n", {"regexp": "^user=(?P<u>\\w+)$", "line": "owner=\\g<u>", "backrefs": True}, ""),
    ("backrefs-firstmatch", b"v=1\nv=2\n", {"regexp": "^v=(\\d)$", "line": "v=\\1\\1", "backrefs": True,
                                              "firstmatch": True}, ""),
    ("regexp-ignorecase-flag", b"Port 22\n", {"regexp": "(?i)^port ", "line": "Port 2222"}, ""),
    ("unicode-line", b"a\n", {"line": "caf\u00e9 \u2713"}, ""),
    ("backrefs-no-match-nothing", b"a\n", {"regexp": "^zzz(.*)", "line": "\\1", "backrefs": True}, ""),
    ("search-string-replaces", b"127.0.0.1 old\nx\n", {"search_string": "127.0.0.1", "line": "127.0.0.1 localhost"}, ""),
    ("search-string-no-match", b"x\n", {"search_string": "a.b", "line": "a.b c"}, ""),
    ("search-string-firstmatch", b"a.b 1\na.b 2\n", {"search_string": "a.b", "line": "a.b 3", "firstmatch": True}, ""),
    ("crlf-add", b"a\r\nb\r\n", {"line": "c"}, ""),
    ("crlf-exact-line", b"a\r\nc\r\n", {"line": "c"}, ""),
    ("crlf-replace", b"a\r\nold\r\n", {"regexp": "^old", "line": "new"}, ""),
    ("lone-cr-inside-a-line", b"a\rb\nc\n", {"line": "b"}, ""),
    ("lone-cr-absent", b"a\rb\nb\n", {"line": "b", "state": "absent"}, ""),
    ("not-utf8-elsewhere", b"caf\xe9\n", {"line": "x"}, ""),
    ("unicode-regex-as-bytes", b"\xc3\xa9t\xc3\xa9=1\n", {"regexp": "^\\w+=", "line": "x=2"}, ""),
    ("absent-line", b"a\nb\na\n", {"line": "a", "state": "absent"}, "diff"),
    ("absent-regexp", b"# c\nK=1\nK=2\nL=3\n", {"regexp": "^K=", "state": "absent"}, ""),
    ("absent-search-string", b"x.y\nxzy\nx.y z\n", {"search_string": "x.y", "state": "absent"}, ""),
    ("absent-nothing-matches", b"a\nb\n", {"line": "z", "state": "absent"}, ""),
    ("absent-missing-file", None, {"line": "z", "state": "absent"}, ""),
    ("absent-crlf-line", b"a\r\nb\r\n", {"line": "a", "state": "absent"}, ""),
    ("create", None, {"line": "k=v", "create": True}, "diff"),
    ("create-with-mode", None, {"line": "k=v", "create": True, "mode": "0640"}, ""),
    ("create-missing-folders", None, {"path": "@/../no/such/f", "line": "x", "create": True}, ""),
    ("mode-only", b"k=v\n", {"line": "k=v", "mode": "0600"}, ""),
    ("mode-and-line", b"k=v\n", {"line": "x", "mode": "0600"}, ""),
    ("mode-as-yaml-number", b"k=v\n", {"line": "k=v", "mode": 0o600}, ""),
    ("mode-same", b"k=v\n", {"line": "k=v", "mode": "0644"}, ""),
    ("mode-without-leading-zero", b"k=v\n", {"line": "k=v", "mode": "600"}, ""),
    ("owner-group-same", b"a\n", {"line": "b", "owner": ME, "group": MY_GROUP}, ""),
    ("symlink-followed", b"a\n", {"line": "b", "backup": True}, "link"),
    ("backup-when-changed", b"a\n", {"line": "b", "backup": True}, ""),
    ("backup-not-when-unchanged", b"a\n", {"line": "a", "backup": True}, ""),
    ("backup-absent", b"a\nb\n", {"line": "a", "state": "absent", "backup": True}, ""),
    ("validate-passes", b"a\n", {"line": "wanted", "validate": "grep -q wanted %s"}, ""),
    ("validate-fails", b"a\n", {"line": "other", "validate": "grep -q wanted %s"}, ""),
    ("validate-stderr", b"a\n", {"line": "b", "validate": "ls /no/such/folder %s"}, ""),
    ("empty-regexp-warns", b"a\nb\n", {"regexp": "", "line": "c"}, ""),
    ("empty-search-string-warns", b"a\nb\n", {"search_string": "", "line": "c"}, ""),
    ("check-replace", b"PORT=1\n", {"regexp": "^PORT=", "line": "PORT=2", "mode": "0600"}, "check,diff"),
    ("check-create", None, {"line": "x", "create": True, "mode": "0600"}, "check"),
    ("check-absent", b"a\nb\n", {"line": "a", "state": "absent", "backup": True}, "check"),
    ("check-backup", b"a\n", {"line": "b", "backup": True}, "check"),
    # refused by both
    ("missing-file", None, {"line": "x"}, ""),
    ("missing-file-check-mode", None, {"line": "x"}, "check"),
    ("directory", "dir", {"line": "x"}, ""),
    ("no-path", b"", {"path": None, "line": "x"}, ""),
    ("backrefs-without-regexp", b"a\n", {"line": "x", "backrefs": True}, ""),
    ("present-without-line", b"a\n", {"regexp": "^a"}, ""),
    ("absent-without-what", b"a\n", {"state": "absent"}, ""),
    ("insertafter-and-insertbefore", b"a\n", {"line": "x", "insertafter": "a", "insertbefore": "b"}, ""),
    ("regexp-and-search-string", b"a\n", {"line": "x", "regexp": "a", "search_string": "b"}, ""),
    ("backrefs-and-search-string", b"a\n", {"line": "x", "regexp": "a", "search_string": "b", "backrefs": True}, ""),
    ("validate-without-placeholder", b"a\n", {"line": "x", "validate": "true"}, ""),
    ("line-with-a-newline", b"a\n", {"line": "x\ny"}, ""),  # written as it is (and again on every run)
    ("line-with-a-newline-at-eof", b"a\nx\ny\n", {"line": "x\ny", "insertafter": "EOF"}, ""),
]

# Where we differ on purpose: id, the file, the arguments, what Ansible does, what we do (the bytes after, or
# FAILED: the task fails and the file is left as it was).
FAILED = "failed"
DIFFERENCES = [
    # Ansible glues the new line to a last line that has no newline when insertafter matched that line
    ("insertafter-last-line-without-newline", b"a\nmark", {"line": "L", "insertafter": "^mark"},
     b"a\nmarkL\n", b"a\nmark\nL\n"),
    # validate without %s is refused before anything is compared, not only when the file would change
    ("validate-without-placeholder-no-change", b"a\n", {"line": "a", "validate": "true"}, b"a\n", FAILED),
    # backrefs: false (the default) beside search_string is no conflict
    ("backrefs-false-with-search-string", b"a\n", {"search_string": "a", "line": "b", "backrefs": False},
     FAILED, b"b\n"),
]


def _with_path(args: dict, path: Path) -> dict:
    out = {k: (str(path) if v == "@" else v.replace("@", str(path)) if isinstance(v, str) and "@/" in v else v)
           for k, v in args.items()}
    if not {"path", "dest", "destfile", "name"} & set(out):
        out["path"] = str(path)
    return {k: v for k, v in out.items() if v is not None}


def _prepare(folder: Path, before, flags: str = "") -> Path:
    """folder/work/f holding `before` ("dir": a folder; with flag link, a symlink to folder/work/real holding it)."""
    (folder / "work").mkdir(parents=True)
    f = folder / "work" / "f"
    if before == "dir":
        f.mkdir()
    elif before is not None:
        target = folder / "work" / "real" if "link" in flags else f
        target.write_bytes(before)
        os.chmod(target, 0o644)
        if target != f:
            f.symlink_to(target)
    return f


def _python_with_ansible() -> str:
    """The python that runs the `ansible` command (its shebang): the one ansible-core is installed for."""
    tool = required_ansible_tool("ansible")
    first = tool.read_text(errors="replace").splitlines()[0]
    return first[2:].strip() if first.startswith("#!") else str(tool.parent / "python3")


def _clean_env(home: Path) -> dict:
    return {"PATH": "/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8", "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_LOCAL_TEMP": str(home / ".ansible-tmp"), "ANSIBLE_REMOTE_TEMP": str(home / ".ansible-remote")}


def run_ansible_module(folder: Path, args: dict, check: bool, diff: bool) -> dict:
    home = folder / "home"
    home.mkdir()
    args_file = folder / "ansible-args.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {**args, "_ansible_check_mode": check,
                                                              "_ansible_diff": diff}}))
    proc = subprocess.run([_python_with_ansible(), "-m", "ansible.modules.lineinfile", str(args_file)],
                          capture_output=True, text=True, timeout=60, cwd=home, env=_clean_env(home))
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert lines, f"ansible's lineinfile printed no result: {proc.stdout}\n{proc.stderr}"
    result = json.loads(lines[-1])
    if "warnings" in result:  # 2.19 sends each as {"event": {"msg": ...}} (the controller prints the msg)
        result["warnings"] = [w["event"]["msg"] if isinstance(w, dict) else w for w in result["warnings"]]
    return result


def run_ours(folder: Path, args: dict, check: bool, diff: bool) -> dict:
    flags = [f for f, on in (("--check", check), ("--diff", diff)) if on]
    return run_by_hand("lineinfile", folder, args, *flags)[1]


def _files(folder: Path) -> dict:
    """The work folder after: {name (a backup as BACKUP): (bytes, mode)}."""
    out = {}
    for p in sorted((folder / "work").rglob("*")):
        if p.is_symlink():
            out[str(p.relative_to(folder / "work"))] = ("link", os.readlink(p).replace(str(folder), "<dir>"))
        elif p.is_file():
            name = "BACKUP" if BACKUP_NAME.match(p.name) else str(p.relative_to(folder / "work"))
            out[name] = (p.read_bytes(), p.stat().st_mode & 0o7777)
    return out


def _both(tmp_path: Path, before, args: dict, flags: str) -> tuple[dict, dict, Path, Path]:
    check, diff = "check" in flags, "diff" in flags
    results = []
    for side, runner in (("ansible", run_ansible_module), ("ours", run_ours)):
        folder = tmp_path / side
        f = _prepare(folder, before, flags)
        results.append(runner(folder, _with_path(args, f), check, diff))
    return results[0], results[1], tmp_path / "ansible", tmp_path / "ours"


def _same_text(theirs: str, ours: str, t_dir: Path, o_dir: Path) -> tuple[str, str]:
    return theirs.replace(str(t_dir), "<dir>"), ours.replace(str(o_dir), "<dir>")


@pytest.mark.parametrize("before, args, flags", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_lineinfile_does_what_ansibles_does(tmp_path, before, args, flags):
    theirs, ours, t_dir, o_dir = _both(tmp_path, before, args, flags)
    assert bool(ours.get("failed")) == bool(theirs.get("failed")), (theirs, ours)
    if theirs.get("failed"):
        t_msg, o_msg = _same_text(theirs["msg"].rstrip(), ours["msg"], t_dir, o_dir)
        assert o_msg.startswith(t_msg), (t_msg, o_msg)
        assert ours.get("rc") == theirs.get("rc")
        assert _files(o_dir) == _files(t_dir)  # a refusal changes nothing
        return
    for key in ("changed", "msg", "found", "warnings"):
        assert ours.get(key) == theirs.get(key), (key, theirs, ours)
    assert bool(ours.get("backup")) == bool(theirs.get("backup")), (theirs, ours)
    assert set(ours) - {"diff", "failed"} == set(theirs) - {"diff", "invocation"}, (theirs, ours)
    if ours.get("backup"):
        assert BACKUP_NAME.match(Path(ours["backup"]).name) and Path(ours["backup"]).read_bytes() == before
    assert _files(o_dir) == _files(t_dir)
    if "diff" in flags:
        content = theirs["diff"] if isinstance(theirs["diff"], dict) else theirs["diff"][0]
        for key in ("before", "after", "before_header", "after_header"):
            t_text, o_text = _same_text(content[key], ours["diff"][key], t_dir, o_dir)
            assert o_text == t_text, key


@pytest.mark.parametrize("before, args, ansible_does, we_do", [c[1:] for c in DIFFERENCES],
                         ids=[c[0] for c in DIFFERENCES])
def test_where_we_differ_on_purpose(tmp_path, before, args, ansible_does, we_do):
    theirs, ours, t_dir, o_dir = _both(tmp_path, before, args, "")
    for result, folder, expected, who in ((theirs, t_dir, ansible_does, "Ansible"), (ours, o_dir, we_do, "ours")):
        after = (folder / "work" / "f").read_bytes()
        got = FAILED if result.get("failed") else after
        assert got == expected, f"{who} did {got!r} ({result.get('msg')}): compare again and update DIFFERENCES"
        if result.get("failed"):
            assert after == before


def test_the_ansible_command_gives_what_the_module_run_alone_gives(tmp_path):
    """The harness's shortcut (the module run alone) against `ansible localhost -m ansible.builtin.lineinfile`."""
    ansible = required_ansible_tool("ansible")
    for i, (before, args, flags) in enumerate([(b"a\nb\n", {"line": "c", "backup": True}, ""),
                                               (b"P=1\n", {"regexp": "^P=", "line": "P=2"}, "check")]):
        alone = tmp_path / f"alone{i}"
        f = _prepare(alone, before)
        direct = run_ansible_module(alone, _with_path(args, f), "check" in flags, False)
        cli = tmp_path / f"cli{i}"
        g = _prepare(cli, before)
        (cli / "home").mkdir()
        proc = subprocess.run(
            [str(ansible), "localhost", "-i", "localhost,", "-c", "local", "-m", "ansible.builtin.lineinfile",
             "-a", json.dumps(_with_path(args, g)), "-e", f"ansible_python_interpreter={_python_with_ansible()}",
             *(["--check"] if "check" in flags else [])],
            capture_output=True, text=True, timeout=120, cwd=cli / "home",
            env={**_clean_env(cli / "home"), "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
                 "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.minimal"})
        assert proc.returncode == 0, proc.stdout + proc.stderr
        result = json.loads(proc.stdout[proc.stdout.index("{"):])
        assert (result["changed"], result["msg"], bool(result["backup"])) == (
            direct["changed"], direct["msg"], bool(direct["backup"]))
        assert g.read_bytes() == f.read_bytes()
