"""library/command.py and library/shell.py against real ansible-core's ansible.builtin.command and shell: the same
arguments, each case in a folder of its own on each side (the same files in it), with the same HOME and PATH.

Ansible's side is one ansible-playbook run (local connection, this python as the interpreter) with a task per case,
registered, then written out as JSON; ours is `python3 -m library.command|shell ARGS.json [--check]` from the
repository root. Compared: rc, stdout, stderr, stdout_lines, stderr_lines, changed, failed, skipped, cmd, warnings,
the time fields' formats, the files the case left; msg is Ansible's where we chose Ansible's (creates/removes
skips), starts with Ansible's words where ours goes on (a failure, check mode) and is ours where Ansible's is ""
(success). Where we differ on purpose (library/command.py's docstring) DIFFERENCES says what each side does.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from _ansible_side import env, registered_by_ansible

from tests.helpers import required_ansible_tool

ROOT = Path(__file__).resolve().parents[2]
BASH = shutil.which("bash")
START = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(\.\d{6})?$")  # Ansible's str(datetime) drops a .000000
DELTA = re.compile(r"^\d+:\d\d:\d\d(\.\d{6})?$")

# id, module, arguments ("@" as chdir: the case's folder on each side), check mode, files made first
CASES = [
    ("trailing-newline", "command", {"cmd": "echo hello"}, False, []),
    ("no-trailing-newline", "command", {"cmd": "printf abc"}, False, []),
    ("multi-line-blank-lines", "command", {"cmd": "printf 'a\\n\\nb\\n\\n\\n'"}, False, []),
    ("strip-empty-ends-off", "command", {"cmd": "printf 'a\\n\\nb\\n\\n'", "strip_empty_ends": False}, False, []),
    ("stderr-and-stdout", "command", {"cmd": "sh -c 'echo out; echo err >&2; echo err2 >&2'"}, False, []),
    ("rc-nonzero", "command", {"cmd": "sh -c 'echo before; echo why >&2; exit 3'"}, False, []),
    ("quoting", "command", {"cmd": "printf '[%s]\\n' 'a b' \"c d\" e\\ f \"x|y;z\" '>' '*'"}, False, []),
    ("vars-expanded-even-quoted", "command", {"cmd": "echo $HOME '${HOME}' ~ $DFP_UNSET_X"}, False, []),
    ("vars-not-expanded", "command", {"cmd": "echo $HOME ~", "expand_argument_vars": False}, False, []),
    # an argv list is expanded only when asked here (ours takes it literally by default, a named difference:
    # tests/library/test_command.py test_an_argv_list_is_literal_unless_asked)
    ("argv-list", "command", {"argv": ["printf", "%s|", "a b", "$HOME", "c"], "expand_argument_vars": True}, False,
     []),
    ("creates-skips", "command", {"cmd": "touch built", "creates": "built", "chdir": "@"}, False, ["built"]),
    ("creates-glob-skips", "command", {"cmd": "touch x", "creates": "dist/*.whl", "chdir": "@"}, False,
     ["dist/p-1.whl"]),
    ("creates-runs", "command", {"cmd": "touch new", "creates": "new", "chdir": "@"}, False, []),
    ("removes-skips", "command", {"cmd": "rm gone", "removes": "gone", "chdir": "@"}, False, []),
    ("removes-runs", "command", {"cmd": "rm old", "removes": "old", "chdir": "@"}, False, ["old"]),
    ("chdir", "command", {"cmd": "ls", "chdir": "@"}, False, ["a", "b"]),
    ("stdin", "command", {"cmd": "cat", "stdin": "one\ntwo"}, False, []),
    ("stdin-newline-counted", "command", {"cmd": "wc -c", "stdin": "abc"}, False, []),
    ("stdin-no-newline", "command", {"cmd": "wc -c", "stdin": "abc", "stdin_add_newline": False}, False, []),
    ("executable-ignored", "command", {"cmd": "echo x", "executable": "/bin/bash"}, False, []),
    ("check-mode-skipped", "command", {"cmd": "touch m", "chdir": "@"}, True, []),
    ("check-mode-creates-would-run", "command", {"cmd": "touch m", "creates": "m", "chdir": "@"}, True, []),
    ("check-mode-creates-would-not", "command", {"cmd": "touch m", "creates": "m", "chdir": "@"}, True, ["m"]),
    ("not-found", "command", {"cmd": "dfp-no-such-program-xyz --x"}, False, []),
    ("shell-pipe-and-stderr", "shell", {"cmd": "printf 'b\\na\\n' | sort; echo err >&2"}, False, []),
    ("shell-rc-nonzero", "shell", {"cmd": "echo x; exit 2"}, False, []),
    ("shell-creates-skips", "shell", {"cmd": "echo y > built", "creates": "built", "chdir": "@"}, False, ["built"]),
    ("shell-chdir-redirect-stdin", "shell", {"cmd": "cat > got; ls; cat got", "stdin": "in", "chdir": "@"}, False,
     ["a"]),
    ("shell-quoting-and-vars", "shell", {"cmd": "echo \"$HOME\" '$HOME' $((2 * 3)) ~"}, False, []),
    ("shell-check-mode", "shell", {"cmd": "touch m", "chdir": "@"}, True, []),
]
if BASH:
    CASES.append(("shell-executable-bash", "shell", {"cmd": 'a=(x y); echo "${a[1]}"', "executable": BASH}, False, []))

# id: {key: (Ansible's, ours)} where we differ on purpose (library/command.py's docstring)
DIFFERENCES = {
    # Ansible's run_command reports the argv it could not start as a string and an OSError's words; ours keeps
    # cmd the list it always is and says the program was not found on PATH, and how to fix it
    "not-found": {"cmd": ("dfp-no-such-program-xyz --x", ["dfp-no-such-program-xyz", "--x"]),
                  "msg": ("Error executing command.", "module 'command': program 'dfp-no-such-program-xyz' not found "
                                                      "on PATH; install it or give its full path in the first word of cmd")},
}


def _prepare(folder: Path, files: list) -> Path:
    folder.mkdir(parents=True)
    for name in files:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text("x")
    return folder


def _args(args: dict, folder: Path) -> dict:
    return {k: (str(folder) if v == "@" else v) for k, v in args.items()}


def _listing(folder: Path) -> list:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.fixture(scope="module")
def both(tmp_path_factory) -> dict:
    """{case id: (Ansible's result, ours, Ansible's folder after, ours after)}: one ansible-playbook run for all."""
    playbook_tool = required_ansible_tool("ansible-playbook")
    root = tmp_path_factory.mktemp("command-vs-ansible")
    home = root / "home"
    home.mkdir()
    tasks = [(cid, {module: _args(args, _prepare(root / "theirs" / cid, files)), "check_mode": check})
             for cid, module, args, check, files in CASES]
    theirs = registered_by_ansible(playbook_tool, home, root, tasks)
    out = {}
    for cid, module, args, check, files in CASES:
        folder = _prepare(root / "ours" / cid, files)
        args_file = root / f"{cid}.args.json"
        args_file.write_text(json.dumps(_args(args, folder)))
        mine = subprocess.run([sys.executable, "-m", f"library.{module}", str(args_file), *(["--check"] if check else [])],
                              capture_output=True, text=True, timeout=60, cwd=ROOT, env=env(home))
        assert mine.stderr == "", mine.stderr
        out[cid] = (theirs[cid], json.loads(mine.stdout), root / "theirs" / cid, folder)
    return out


SAME = ("rc", "stdout", "stderr", "stdout_lines", "stderr_lines", "cmd")
FLAGS = ("changed", "failed", "skipped")


@pytest.mark.parametrize("cid", [c[0] for c in CASES])
def test_command_and_shell_do_what_ansibles_do(both, cid):
    theirs, ours, t_dir, o_dir = both[cid]
    differ = DIFFERENCES.get(cid, {})
    for key, (their_value, our_value) in differ.items():
        assert (theirs.get(key), ours.get(key)) == (their_value, our_value), key
    for key in SAME:
        if key not in differ:
            assert ours.get(key) == theirs.get(key), f"{key}: ours {ours.get(key)!r}, Ansible's {theirs.get(key)!r}"
    for key in FLAGS:
        assert bool(ours.get(key)) == bool(theirs.get(key)), f"{key}: ours {ours.get(key)!r}, Ansible's {theirs.get(key)!r}"
    assert ours.get("warnings", []) == theirs.get("warnings", [])
    for key, form in (("start", START), ("end", START), ("delta", DELTA)):
        assert (ours.get(key) is None) == (theirs.get(key) is None), key
        assert ours.get(key) is None or (form.match(ours[key]) and form.match(theirs[key])), key
    assert _listing(o_dir) == _listing(t_dir)
    if "msg" in differ:
        return
    if theirs["msg"] == "":  # success: Ansible says nothing, ours what ran
        assert not theirs.get("failed") and ours["msg"].startswith("ran ")
    elif theirs["msg"].startswith(("Did not run", "Would not run")):  # the skips: Ansible's words exactly
        assert ours["msg"] == theirs["msg"]
    else:  # a failure, check mode: Ansible's words first, ours after
        assert ours["msg"].startswith(theirs["msg"]) and len(ours["msg"]) > len(theirs["msg"]), (ours["msg"], theirs["msg"])


def test_the_cases_cover_what_the_brief_names(both):
    """Output with and without a trailing newline, several lines, stderr, rc != 0, creates and removes skipping,
    chdir, stdin, quoting: each is a case above, on both modules where it matters."""
    results = {cid: ours for cid, (_t, ours, _a, _b) in both.items()}
    assert results["rc-nonzero"]["rc"] == 3 and results["shell-rc-nonzero"]["rc"] == 2
    assert results["creates-skips"]["stdout"] == "skipped, since built exists"
    assert results["removes-skips"]["msg"] == "Did not run command since 'gone' does not exist"
    assert results["quoting"]["stdout_lines"] == ["[a b]", "[c d]", "[e f]", "[x|y;z]", "[>]", "[*]"]
    assert results["stdin-newline-counted"]["stdout"].strip() == "4"
