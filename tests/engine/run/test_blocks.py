"""block / rescue / always and import_role, as in Ansible, on the local host with real module runs."""

from __future__ import annotations

import yaml

from engine.api import run_playbook


def run_tasks(tmp_path, tasks, roles_dir=None, **play_kw):
    pb = tmp_path / "pb.yaml"
    pb.write_text(yaml.safe_dump([dict({"hosts": "all", "gather_facts": False, "tasks": tasks}, **play_kw)]))
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": {"h": {"ansible_connection": "local"}}}}))
    return run_playbook(pb, inv)


def ran(res) -> list[tuple[str, str]]:
    return [(r.task, r.status) for r in res.results]


def test_rescue_and_always_after_a_failure(tmp_path):
    res = run_tasks(tmp_path, [
        {"block": [{"name": "breaks", "command": {"argv": ["false"]}}, {"name": "not reached", "debug": {"msg": "x"}}],
         "rescue": [{"name": "rescue sees the failure", "debug": {"msg": "{{ ansible_failed_task.name }}"}}],
         "always": [{"name": "always", "debug": {"msg": "cleanup"}}]},
        {"name": "after", "debug": {"msg": "after"}},
    ])
    assert res.exit_code == 0, res.tasks
    assert ran(res) == [("breaks", "failed"), ("rescue sees the failure", "ok"), ("always", "ok"), ("after", "ok")]
    assert res.results[1].msg == "breaks"
    assert res.recap["h"]["failed"] == 0 and res.recap["h"]["rescued"] == 1
    assert res.tasks[0]["rescued"] is True


def test_always_runs_and_the_host_stays_failed_without_rescue(tmp_path):
    res = run_tasks(tmp_path, [
        {"block": [{"name": "breaks", "command": {"argv": ["false"]}}],
         "always": [{"name": "always", "debug": {"msg": "cleanup"}}]},
        {"name": "after", "debug": {"msg": "after"}},
    ])
    assert res.exit_code == 2
    assert ran(res) == [("breaks", "failed"), ("always", "ok")]
    assert res.recap["h"]["failed"] == 1 and res.recap["h"]["rescued"] == 0


def test_a_failing_rescue_fails_the_host_and_always_still_runs(tmp_path):
    res = run_tasks(tmp_path, [
        {"block": [{"name": "breaks", "command": {"argv": ["false"]}}],
         "rescue": [{"name": "rescue breaks too", "fail": {"msg": "no luck"}}],
         "always": [{"name": "always", "debug": {"msg": "cleanup"}}]},
    ])
    assert res.exit_code == 2
    assert ran(res) == [("breaks", "failed"), ("rescue breaks too", "failed"), ("always", "ok")]


def test_block_when_tags_and_vars_reach_its_tasks(tmp_path):
    res = run_tasks(tmp_path, [
        {"name": "skipped block", "when": "false", "block": [{"name": "a", "debug": {"msg": "a"}}]},
        {"name": "vars block", "vars": {"word": "from-block"},
         "block": [{"name": "b", "debug": {"msg": "{{ word }}"}},
                   {"block": [{"name": "nested", "debug": {"msg": "{{ word }}-{{ inner }}"}, "vars": {"inner": "own"}}]}]},
    ])
    assert res.exit_code == 0, res.tasks
    assert ran(res) == [("a", "skipped"), ("b", "ok"), ("nested", "ok")]
    assert [r.msg for r in res.results[1:]] == ["from-block", "from-block-own"]


def test_import_role_inside_a_block_brings_defaults_and_handlers(tmp_path):
    role = tmp_path / "roles" / "greeter"
    role.mkdir(parents=True)
    (role / "defaults.yaml").write_text("greeting: hello\n")
    (role / "tasks.yaml").write_text(yaml.safe_dump([
        {"name": "greet", "command": {"argv": ["echo", "{{ greeting }} {{ who }}"]}, "notify": "said"}]))
    (role / "handlers.yaml").write_text(yaml.safe_dump([{"name": "said", "debug": {"msg": "handled"}}]))
    res = run_tasks(tmp_path, [{"block": [{"import_role": {"name": "greeter"}, "vars": {"who": "world"}}],
                           "rescue": [{"name": "never", "debug": {"msg": "x"}}]}])
    assert res.exit_code == 0, res.tasks
    assert ran(res) == [("greet", "changed"), ("said", "ok")]


def test_unknown_block_keyword_is_bad_input(tmp_path):
    res = run_tasks(tmp_path, [{"block": [{"name": "a", "debug": {"msg": "a"}}], "rescu": []}])
    assert res.exit_code == 4 and "rescu" in res.error
