"""The `environment` keyword on play, block and task, as in Ansible: merged (the inner keys win), rendered per
host, reaching the processes a module starts, the worker's own environment unchanged afterwards, a
secret-named variable's value masked in what the module prints; bad values refused at load."""

from __future__ import annotations

import yaml

from engine.api import run_playbook

INV = {"all": {"hosts": {"h": {"ansible_connection": "local", "region": "eu"}}}}
SHOW = {"argv": ["sh", "-c", "echo A=$DFP_A B=$DFP_B C=$DFP_C T=$HF_TOKEN"]}


def book(tmp_path, plays):
    path = tmp_path / "pb.yaml"
    path.write_text(yaml.safe_dump(plays, sort_keys=False))
    return str(path)


def stdout_of(res, name):
    return next(t for t in res.tasks if t["task"] == name)


def test_play_block_and_task_environments_merge_and_reach_the_command(tmp_path):
    plays = [{"hosts": "all", "gather_facts": False, "environment": {"DFP_A": "play", "DFP_B": "play"},
              "vars": {"hf_token": "hf_s3cret_value"}, "tasks": [
                  {"block": [
                      {"name": "inner", "command": SHOW, "register": "inner",
                       "environment": {"DFP_C": "{{ region }}-{{ 1 + 1 }}", "HF_TOKEN": "{{ hf_token }}"}},
                  ], "environment": {"DFP_B": "block"}},
                  {"name": "outer", "command": SHOW, "register": "outer"},
                  {"name": "after", "command": {"argv": ["sh", "-c", "echo C=${DFP_C:-unset}"]}, "register": "after",
                   "environment": {}},
              ]}]
    res = run_playbook(book(tmp_path, plays), inventory=INV)
    assert res.exit_code == 0, res.tasks
    got = res.registered["h"]
    assert got["inner"]["stdout"].strip() == "A=play B=block C=eu-2 T=********"
    assert got["outer"]["stdout"].strip() == "A=play B=play C= T="
    assert got["after"]["stdout"].strip() == "C=unset"  # the worker's environment was restored after `inner`
    assert "hf_s3cret_value" not in str(res.tasks) and "hf_s3cret_value" not in str(res.registered)


def test_an_environment_from_a_template_giving_a_mapping(tmp_path):
    plays = [{"hosts": "all", "gather_facts": False, "vars": {"proxy_env": {"DFP_A": "proxy"}}, "tasks": [
        {"name": "t", "command": SHOW, "register": "r", "environment": "{{ proxy_env }}"}]}]
    res = run_playbook(book(tmp_path, plays), inventory=INV)
    assert res.exit_code == 0 and res.registered["h"]["r"]["stdout"].startswith("A=proxy "), res.tasks


def test_bad_environments_are_refused_at_load_and_nothing_runs(tmp_path):
    made = tmp_path / "made"
    first = {"name": "would make", "file": {"path": str(made), "state": "directory"}}
    for env, needle in (([1, 2], "'environment' must be a mapping"), ({"1BAD": "x"}, "not an environment variable name"),
                        ({"A": {"x": 1}}, "'environment' A must be a string"),
                        ({"A": "a\0b"}, "'environment' A holds a NUL character"),
                        ({"A": "{{ undefined_here }}"}, "variable 'undefined_here' is undefined")):
        plays = [{"hosts": "all", "gather_facts": False, "tasks": [first, {"name": "t", "command": SHOW,
                                                                          "environment": env}]}]
        res = run_playbook(book(tmp_path, plays), inventory=INV)
        assert res.exit_code == 4 and needle in res.error and not made.exists(), (env, res.error)


def test_an_environment_on_import_tasks_and_include_role_reaches_their_tasks(tmp_path):
    (tmp_path / "t.yaml").write_text(yaml.safe_dump([{"name": "imported", "command": SHOW, "register": "i"}]))
    role = tmp_path / "roles" / "r" / "tasks" / "main.yml"
    role.parent.mkdir(parents=True)
    role.write_text(yaml.safe_dump([{"name": "in role", "command": SHOW, "register": "o"}]))
    plays = [{"hosts": "all", "gather_facts": False, "tasks": [
        {"import_tasks": "t.yaml", "environment": {"DFP_A": "imp"}},
        {"include_role": {"name": "r"}, "environment": {"DFP_B": "role"}}]}]
    res = run_playbook(book(tmp_path, plays), inventory=INV)
    assert res.exit_code == 0, res.tasks
    assert res.registered["h"]["i"]["stdout"].startswith("A=imp B= ")
    assert res.registered["h"]["o"]["stdout"].startswith("A= B=role ")
