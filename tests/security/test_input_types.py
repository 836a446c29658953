"""Hostile types in playbooks, roles, inventories and -e: every keyword and variable name is checked at load.

A wrongly typed keyword must not be read as "true" (a mapping as `when:`, the string "false" as
`ignore_errors:`), and a variable named by a number must not crash the engine: each is one paragraph
naming the file, the task and the field, exit 4, and the host untouched (the first task of every
playbook here would create a marker folder). Each case failed on the engine before these checks.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from engine.api import run_playbook

ROOT = Path(__file__).resolve().parents[2]
LOCAL = {"all": {"hosts": {"local": {"ansible_connection": "local"}}}}


def _write(path: Path, data) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
    return path


def _playbook(tmp_path: Path, tasks: list, **play) -> tuple[Path, Path]:
    """A playbook whose first task would create tmp_path/marker, and a local inventory; returns (playbook, marker)."""
    marker = tmp_path / "marker"
    first = {"name": "Would change the host", "file": {"path": str(marker), "state": "directory"}}
    body = dict({"hosts": "all", "gather_facts": False, "tasks": [first, *tasks]}, **play)
    return _write(tmp_path / "pb.yaml", [body]), marker


def _refused(tmp_path: Path, tasks: list, *needles: str, **play) -> None:
    pb, marker = _playbook(tmp_path, tasks, **play)
    res = run_playbook(pb, _write(tmp_path / "inv.yaml", LOCAL))
    assert res.exit_code == 4, (res.error, res.tasks)
    for needle in (str(pb), *needles):
        assert needle in res.error, f"{needle!r} not in: {res.error}"
    assert not marker.exists(), "a bad keyword must change nothing on the host"


def invoke(*args: str, timeout: int = 60) -> tuple[int, str]:
    proc = subprocess.run([sys.executable, "-m", "invoke", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    return proc.returncode, proc.stdout + proc.stderr


def _clean_error(code: int, out: str, *needles: str) -> None:
    assert code == 4, out
    assert "Traceback" not in out, out
    for needle in needles:
        assert needle in out, f"{needle!r} not in:\n{out}"


# -- task keywords ------------------------------------------------------------------------------------
WRONG_TASK_KEYWORDS = [
    ({"when": {"a": 1}}, "'when' must be"),
    ({"when": 1}, "'when' must be"),
    ({"when": ["true", {"a": 1}]}, "'when' must be"),
    ({"changed_when": 3}, "'changed_when' must be"),
    ({"failed_when": []}, "'failed_when' must be at least one condition"),
    ({"until": {"a": 1}, "retries": 1, "delay": 0}, "'until' must be"),
    ({"ignore_errors": "maybe"}, "'ignore_errors' must be true or false"),
    ({"no_log": "{{ hide_it }}"}, "'no_log' is a template"),
    ({"check_mode": [True]}, "'check_mode' must be true or false"),
    ({"retries": -1, "until": "true"}, "'retries' must be a whole number >= 0"),
    ({"retries": True, "until": "true"}, "'retries' must be a whole number >= 0"),
    ({"retries": 2.5, "until": "true"}, "'retries' must be a whole number >= 0"),
    ({"delay": -1, "retries": 1, "until": "false"}, "'delay' must be a number of seconds"),
    ({"delay": float("inf"), "retries": 1, "until": "false"}, "'delay' must be a number of seconds"),
    ({"notify": {"a": 1}}, "'notify' must be a name or a list of names"),
    ({"tags": {"a": 1}}, "'tags' must be a name, names separated by commas, or a list of names"),
    ({"listen": {"a": 1}}, "'listen' must be a name or a list of names"),
    ({"loop": {"a": 1}}, "'loop' must be a list, or a template"),
    ({"loop": "a b c"}, "'loop' must be a list, or a template"),
    ({"loop": [1], "with_items": [2]}, "has 'loop' and 'with_items'"),
    ({"loop": [1], "loop_control": {"loop_var": "1x"}}, "'loop_control.loop_var' must be a variable name"),
    ({"vars": {1: "x"}}, "variable name 1 (a number, not a string) is not valid"),
    ({"vars": {"bad-name": "x"}}, "variable name 'bad-name' is not valid"),
    ({"name": ["a", "list"]}, "'name' must be a non-empty string"),
    ({"set_fact_args": {2: "x"}}, "variable name 2 (a number, not a string) is not valid"),
]


@pytest.mark.parametrize("keywords,needle", WRONG_TASK_KEYWORDS, ids=[str(k) for k, _ in WRONG_TASK_KEYWORDS])
def test_wrongly_typed_task_keyword_is_refused_before_any_host_changes(tmp_path, keywords, needle):
    keywords = dict(keywords)
    task = {"name": "Checked", **({"set_fact": keywords.pop("set_fact_args")} if "set_fact_args" in keywords else {"debug": {"msg": "x"}})}
    task.update(keywords)
    _refused(tmp_path, [task], "task 2", needle)


WRONG_PLAY_KEYWORDS = [
    ({"hosts": {"a": 1}}, "'hosts' must be a host, group or pattern"),
    ({"hosts": ["all", 1]}, "'hosts' must be a host, group or pattern"),
    ({"gather_facts": "sometimes"}, "'gather_facts' must be true or false"),
    ({"vars": {1: "x"}}, "variable name 1 (a number, not a string) is not valid"),
    ({"tags": [{"a": 1}]}, "'tags' must be a name, names separated by commas, or a list of names"),
    ({"name": 42}, "'name' must be a non-empty string"),
]


@pytest.mark.parametrize("keywords,needle", WRONG_PLAY_KEYWORDS, ids=[str(k) for k, _ in WRONG_PLAY_KEYWORDS])
def test_wrongly_typed_play_keyword_is_refused(tmp_path, keywords, needle):
    _refused(tmp_path, [], "play 1", needle, **keywords)


# -- Ansible's boolean words mean what they say ----------------------------------------------------------
@pytest.mark.parametrize("word", ["false", "no", "OFF", "0"])
def test_ignore_errors_false_as_a_word_does_not_ignore_the_failure(tmp_path, word):
    """bool("false") is True: the failure used to be ignored and the run reported success."""
    tasks = [{"name": "Fails", "fail": {"msg": "boom"}, "ignore_errors": word}, {"name": "After", "debug": {"msg": "x"}}]
    pb, _ = _playbook(tmp_path, tasks)
    res = run_playbook(pb, _write(tmp_path / "inv.yaml", LOCAL))
    assert res.exit_code == 2, res.tasks
    assert [r.status for r in res.find("Fails")] == ["failed"] and not res.find("After")
    _write(pb, [dict(yaml.safe_load(pb.read_text())[0], tasks=[dict(tasks[0], ignore_errors="Yes")])])
    assert run_playbook(pb, tmp_path / "inv.yaml").exit_code == 0  # and a true word still ignores it


def test_no_log_check_mode_gather_facts_words_are_read_as_ansible_reads_them(tmp_path):
    made = tmp_path / "made-for-real"
    tasks = [
        {"name": "Shown", "debug": {"msg": "visible-text"}, "no_log": "no"},
        {"name": "Not a dry run", "file": {"path": str(made), "state": "directory"}, "check_mode": "false"},
        {"name": "No facts gathered", "assert": {"that": ["facts == {}"]}},
    ]
    pb, _ = _playbook(tmp_path, tasks, gather_facts="no")
    res = run_playbook(pb, _write(tmp_path / "inv.yaml", LOCAL))
    assert res.exit_code == 0, res.tasks
    assert "visible-text" in res.find("Shown")[0].msg
    assert made.is_dir()


def test_condition_lists_must_all_hold(tmp_path):
    """A list under changed_when/failed_when/until is "all of these" (as in Ansible), not "a non-empty list"."""
    tasks = [
        {"name": "Not changed", "debug": {"msg": "x"}, "changed_when": ["false", "true"]},
        {"name": "Not failed", "fail": {"msg": "boom"}, "failed_when": [True, "1 == 2"]},
        {"name": "Failed", "debug": {"msg": "x"}, "failed_when": ["true", "1 == 1"]},
    ]
    pb, _ = _playbook(tmp_path, tasks)
    res = run_playbook(pb, _write(tmp_path / "inv.yaml", LOCAL))
    assert [r.status for r in res.find("Not changed")] == ["ok"], res.tasks
    assert [r.status for r in res.find("Not failed")] == ["ok"], res.tasks
    assert [r.status for r in res.find("Failed")] == ["failed"], res.tasks


# -- variable names everywhere ---------------------------------------------------------------------------
def _role(tmp_path: Path, defaults=None) -> None:
    _write(tmp_path / "roles" / "probe" / "tasks.yaml", [{"name": "Role task", "debug": {"msg": "x"}}])
    if defaults is not None:
        _write(tmp_path / "roles" / "probe" / "defaults.yaml", defaults)


@pytest.mark.parametrize(
    "role_entry,defaults,needle",
    [
        ({"role": "probe", 1: "x"}, None, "role 'probe': parameters: variable name 1"),
        ({"role": "probe", "vars": {1: "x"}}, None, "role 'probe': 'vars': variable name 1"),
        ("probe", {1: "x"}, "defaults.yaml: variable name 1"),
        ("probe", {"model-path": "x"}, "defaults.yaml: variable name 'model-path'"),
        ({"role": "probe", "tags": {"a": 1}}, None, "'tags' must be a name, names separated by commas, or a list of names"),
        ({"role": ["probe"]}, None, "'role' must be a role name"),
    ],
)
def test_role_params_and_defaults_need_variable_names(tmp_path, role_entry, defaults, needle):
    _role(tmp_path, defaults)
    pb, marker = _playbook(tmp_path, [], roles=[role_entry])
    code, out = invoke("play", str(pb), "-i", str(_write(tmp_path / "inv.yaml", LOCAL)))
    _clean_error(code, out, needle, "is not valid" if "variable name" in needle else "must be")
    assert not marker.exists()


def _inventory_with(tmp_path: Path, where: str, variables: dict) -> Path:
    inv = {"all": {"hosts": {"local": {"ansible_connection": "local"}}, "children": {"gpu": {"hosts": {"local": None}}}}}
    if where == "host":
        inv["all"]["hosts"]["local"].update(variables)
    elif where == "group":
        inv["all"]["children"]["gpu"]["vars"] = variables
    else:  # group_vars/ or host_vars/ file beside the inventory
        _write(tmp_path / where, variables)
    return _write(tmp_path / "inv.yaml", inv)


@pytest.mark.parametrize("where", ["host", "group", "group_vars/gpu.yaml", "host_vars/local.yml", "group_vars/all/x.yaml"])
@pytest.mark.parametrize("name,shown", [(1, "1 (a number, not a string)"), ("bad name", "'bad name'"), (None, "None (null, not a string)")])
def test_inventory_variable_names_are_checked_in_every_source(tmp_path, where, name, shown):
    inv = _inventory_with(tmp_path, where, {name: "x", "fine": 1})
    code, out = invoke("inventory", "--list", "-i", str(inv))
    _clean_error(code, out, f"variable name {shown}", "is not valid", where if "/" in where else "inv.yaml")
    pb, marker = _playbook(tmp_path, [])
    code, out = invoke("play", str(pb), "-i", str(inv))
    _clean_error(code, out, f"variable name {shown}")
    assert not marker.exists()


@pytest.mark.parametrize(
    "inventory,needle",
    [
        ({"all": {"children": {1: {"hosts": {"a": None}}}}}, "group name 1 (a number, not a string) is not valid"),
        ({"all": {"hosts": [{"a": 1}]}}, "host name {'a': 1} (dict, not a string) is not valid"),
        ({"all": {"hosts": {"../../etc": None}}}, "host name '../../etc' is not valid"),
        ({"all": {"hosts": {"h": {"ansible_host": "127.0.0.1", "ansible_port": "abc"}}}}, "ansible_port must be a port number"),
        ({"all": {"hosts": {"h": {"ansible_host": "127.0.0.1", "ansible_port": 70000}}}}, "ansible_port must be a port number"),
    ],
)
def test_inventory_names_and_port_are_checked(tmp_path, inventory, needle):
    inv = _write(tmp_path / "inv.yaml", inventory)
    pb, marker = _playbook(tmp_path, [])
    code, out = invoke("play", str(pb), "-i", str(inv))
    _clean_error(code, out, "inv.yaml", needle)


# -- -e ---------------------------------------------------------------------------------------------------
def test_extra_vars_file_needs_variable_names(tmp_path):
    pb, marker = _playbook(tmp_path, [])
    evars = _write(tmp_path / "extra.yaml", {"fine": 1, 1: "x"})
    code, out = invoke("play", str(pb), "-i", str(_write(tmp_path / "inv.yaml", LOCAL)), "-e", f"@{evars}")
    _clean_error(code, out, "extra.yaml: variable name 1 (a number, not a string) is not valid")
    assert not marker.exists()


@pytest.mark.parametrize("bad", ["sk-live-SECRETVALUE123", "hf token=SECRETVALUE123", "c2VjcmV0/SECRETVALUE123==x"])
def test_extra_var_errors_never_echo_the_value(tmp_path, bad):
    """A mistyped -e is often a pasted token: the error names its position, never its text."""
    pb, marker = _playbook(tmp_path, [])
    code, out = invoke("play", str(pb), "-i", str(_write(tmp_path / "inv.yaml", LOCAL)), "-e", "ok=1", "-e", bad)
    _clean_error(code, out, "-e number 2")
    assert "SECRETVALUE" not in out, out
    assert not marker.exists()


def test_inventory_list_still_prints_valid_names(tmp_path):
    """The checks refuse only what is wrong: a normal inventory with numbers as host names still lists."""
    inv = _write(tmp_path / "inv.yaml", {"all": {"hosts": {10: {"x_1": 1}}, "vars": {"ansible_port": "2222"}}})
    code, out = invoke("inventory", "--list", "-i", str(inv))
    assert code == 0, out
    assert json.loads(out)["_meta"]["hostvars"]["10"]["x_1"] == 1
