"""Play keywords that shape a run, compared with real ansible-playbook on `ansible_connection: local` hosts:
post_tasks and the handler flushes after pre_tasks, after roles and tasks and after post_tasks; force_handlers (the
keyword and --force-handlers); strategy free; order; the connection keyword; vars_prompt answered by -e or its
default. Each task appends `HOST:WORD` to a log file, so both tools' sequences per host are compared."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from engine.api import run_playbook
from tests.helpers import required_ansible_tool

HOSTS = ("a", "b", "c")


def _inventory(tmp_path: Path) -> Path:
    hosts = {h: {"ansible_connection": "local", "ansible_python_interpreter": sys.executable} for h in HOSTS}
    path = tmp_path / "inv.yaml"
    path.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    return path


def log_task(word: str, **more) -> dict:
    """A task appending `HOST:word` to the log (changed, so it can notify)."""
    return {"name": word, "shell": f"echo {{{{ inventory_hostname }}}}:{word} >> {{{{ log }}}}", **more}


def _book(tmp_path: Path, tool: str, play: dict) -> tuple[Path, Path]:
    log = tmp_path / f"{tool}.log"
    play = {"gather_facts": False, **play, "vars": {**play.get("vars", {}), "log": str(log)}}
    path = tmp_path / f"{tool}.yaml"
    path.write_text(yaml.safe_dump([play], sort_keys=False))
    return path, log


def sequences(log: Path) -> dict[str, list[str]]:
    """Each host's words, in the order it wrote them."""
    out: dict[str, list[str]] = {}
    for line in log.read_text().splitlines() if log.exists() else []:
        host, word = line.split(":", 1)
        out.setdefault(host, []).append(word)
    return out


def ours(tmp_path: Path, play: dict, *args: str, **kw) -> tuple[int, dict, object]:
    book, log = _book(tmp_path, "ours", play)
    res = run_playbook(str(book), inventory=str(_inventory(tmp_path)), **kw)
    return res.exit_code, sequences(log), res


def ansible(tmp_path: Path, play: dict, *args: str) -> tuple[int, dict, str]:
    book, log = _book(tmp_path, "ansible", play)
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_LOCAL_TEMP": str(home / ".tmp"), "ANSIBLE_RETRY_FILES_ENABLED": "False"}
    proc = subprocess.run([str(required_ansible_tool("ansible-playbook")), "-i", str(_inventory(tmp_path)), str(book),
                           *args], env=env, capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL)
    return proc.returncode, sequences(log), proc.stdout + proc.stderr


EXIT = {0: 0, 2: 2, 4: 4}  # ansible-playbook's 2 (a host failed) is ours too


def same(tmp_path: Path, play: dict, *args: str, **kw) -> dict:
    """Both tools on the same play: the same exit code and the same per-host sequences; ours returned."""
    a_code, a_seq, a_out = ansible(tmp_path, play, *args)
    o_code, o_seq, res = ours(tmp_path, play, **kw)
    assert o_seq == a_seq, f"ours {o_seq}\nansible {a_seq}\n{a_out[-3000:]}"
    assert EXIT.get(a_code, a_code) == o_code, (a_code, o_code, a_out[-3000:])
    return o_seq


def test_post_tasks_and_the_handler_flushes_between_parts(tmp_path):
    play = {"hosts": "all", "pre_tasks": [log_task("pre", notify="h")],
            "tasks": [log_task("task", notify="h")], "post_tasks": [log_task("post", notify="h")],
            "handlers": [log_task("h")]}
    seq = same(tmp_path, play)
    assert seq["a"] == ["pre", "h", "task", "h", "post", "h"]


@pytest.mark.parametrize("how", ["keyword", "option", "none"])
def test_force_handlers_run_the_handlers_a_failed_host_notified(tmp_path, how):
    play = {"hosts": "all",
            "tasks": [log_task("notify", notify="h"),
                      {"name": "fail b", "fail": {"msg": "boom"}, "when": "inventory_hostname == 'b'"},
                      log_task("after")],
            "post_tasks": [log_task("post")],
            "handlers": [log_task("h")]}
    if how == "keyword":
        play["force_handlers"] = True
    args = ("--force-handlers",) if how == "option" else ()
    seq = same(tmp_path, play, *args, force_handlers=how == "option")
    assert seq["b"] == (["notify", "h"] if how != "none" else ["notify"])
    assert seq["a"] == ["notify", "after", "h", "post"]


def test_a_plays_force_handlers_false_beats_the_option(tmp_path):
    play = {"hosts": "all", "force_handlers": False,
            "tasks": [log_task("notify", notify="h"), {"name": "fail", "fail": {"msg": "x"}}],
            "handlers": [log_task("h")]}
    code, seq, _res = ours(tmp_path, play, force_handlers=True)
    assert code == 2 and seq == {h: ["notify"] for h in HOSTS}


def test_ansible_force_handlers_in_the_environment_is_the_options_default(tmp_path, monkeypatch):
    """ANSIBLE_FORCE_HANDLERS=true forces as --force-handlers does (ansible-core's handlers target sets it)."""
    monkeypatch.setenv("ANSIBLE_FORCE_HANDLERS", "true")
    play = {"hosts": "all", "tasks": [log_task("notify", notify="h"),
                                      {"name": "fail b", "fail": {"msg": "x"}, "when": "inventory_hostname == 'b'"}],
            "handlers": [log_task("h")]}
    _code, seq, _res = ours(tmp_path, play)
    assert seq["b"] == ["notify", "h"]


@pytest.mark.parametrize("order", ["reverse_inventory", "sorted", "reverse_sorted", "inventory"])
def test_order_sets_the_hosts_order(tmp_path, order):
    play = {"hosts": "all", "order": order, "serial": 1, "tasks": [log_task("t")]}
    _, _, res = ours(tmp_path, play)
    hosts = [r.host for r in res.find("t")]
    expected = {"reverse_inventory": ["c", "b", "a"], "reverse_sorted": ["c", "b", "a"]}.get(order, ["a", "b", "c"])
    assert hosts == expected
    a_code, _a_seq, out = ansible(tmp_path, play)
    assert a_code == 0 and re.findall(r"changed: \[(\w)\]", out) == expected


def test_shuffle_keeps_every_host_once(tmp_path):
    _, seq, res = ours(tmp_path, {"hosts": "all", "order": "shuffle", "tasks": [log_task("t")]})
    assert res.exit_code == 0 and sorted(seq) == list(HOSTS)


def test_strategy_free_lets_each_host_go_at_its_own_pace(tmp_path):
    """b's slow first task does not hold a and c back: they finish their two tasks before b ends its first."""
    slow = {"name": "slow", "shell": "if [ {{ inventory_hostname }} = b ]; then sleep 1.5; fi; "
                                     "echo {{ inventory_hostname }}:one >> {{ log }}"}
    play = {"hosts": "all", "strategy": "free", "tasks": [slow, log_task("two")]}
    seq = same(tmp_path, play)
    assert seq == {h: ["one", "two"] for h in HOSTS}
    lines = (tmp_path / "ours.log").read_text().splitlines()
    assert lines.index("b:one") > lines.index("a:two") and lines.index("b:one") > lines.index("c:two")


def test_strategy_linear_is_accepted(tmp_path):
    seq = same(tmp_path, {"hosts": "all", "strategy": "linear", "tasks": [log_task("one")]})
    assert seq == {h: ["one"] for h in HOSTS}


def test_connection_local_runs_hosts_without_their_own_connection_here(tmp_path):
    """A host with no address that could be reached runs on the control node under `connection: local`."""
    (tmp_path / "inv.yaml").write_text(yaml.safe_dump({"all": {"hosts": {"nowhere.invalid": {
        "ansible_python_interpreter": sys.executable}}}}))
    marker = tmp_path / "ran-here"
    (tmp_path / "pb.yaml").write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "connection": "local",
                                                       "tasks": [{"name": "t", "file": {"path": str(marker),
                                                                                        "state": "touch"}}]}]))
    res = run_playbook(str(tmp_path / "pb.yaml"), inventory=str(tmp_path / "inv.yaml"))
    assert res.exit_code == 0 and marker.exists(), res.tasks


def test_vars_prompt_takes_extra_vars_then_the_default(tmp_path):
    play = {"hosts": "a", "vars_prompt": [{"name": "answer", "prompt": "?", "default": "dflt"},
                                          {"name": "given", "prompt": "?"}],
            "tasks": [log_task("{{ answer }}-{{ given }}")]}
    seq = same(tmp_path, play, "-e", "given=cli", extra_vars={"given": "cli"})
    assert seq == {"a": ["dflt-cli"]}


def test_vars_prompt_without_default_nor_terminal_is_refused(tmp_path):
    play = {"hosts": "a", "vars_prompt": [{"name": "answer"}], "tasks": [log_task("x")]}
    code, seq, res = ours(tmp_path, play)
    assert code == 4 and "vars_prompt 'answer' has no default" in res.error and not seq


@pytest.mark.parametrize("raw,needle", [
    ({"strategy": "debug"}, "'strategy' must be one of linear, free"),
    ({"order": "random"}, "'order' must be one of inventory"),
    ({"connection": "winrm"}, "'connection' must be one of local, ssh, smart"),
    ({"force_handlers": "maybe"}, "'force_handlers' must be true or false"),
    ({"vars_files": [{"a": 1}]}, "'vars_files' must be a list of file names"),
    ({"vars_prompt": [{"name": "x", "encrypt": "sha512_crypt"}]}, "unsupported key(s) encrypt"),
])
def test_wrong_play_keywords_are_refused(tmp_path, raw, needle):
    code, _seq, res = ours(tmp_path, {"hosts": "a", **raw, "tasks": [log_task("x")]})
    assert code == 4 and needle in res.error, res.error
