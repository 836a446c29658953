"""Ansible's Jinja tests on registered results, under each of Ansible's names: changed/change, failed/failure,
success/succeeded/successful, skipped/skip, reachable/unreachable."""

from __future__ import annotations

import yaml

from engine.api import run_playbook

INV = {"all": {"hosts": {"h": {"ansible_connection": "local"}}}}
NAMES = ["changed", "change", "failed", "failure", "success", "succeeded", "successful", "skipped", "skip",
         "reachable", "unreachable"]


def test_result_tests_under_every_ansible_name(tmp_path):
    tasks = [{"name": "ran", "command": {"argv": ["true"]}, "register": "ran"},
             {"name": "broke", "command": {"argv": ["false"]}, "register": "broke", "ignore_errors": True},
             {"name": "not run", "command": {"argv": ["true"]}, "when": "false", "register": "notrun"},
             {"name": "tests", "debug": {"msg": " ".join(
                 f"{{{{ [ran is {n}, broke is {n}, notrun is {n}] | map('int') | join('') }}}}" for n in NAMES)}}]
    path = tmp_path / "pb.yaml"
    path.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": tasks}], sort_keys=False))
    res = run_playbook(str(path), inventory=INV)
    assert res.exit_code == 0, res.tasks
    shown = dict(zip(NAMES, next(r.msg for r in res.find("tests")).split()))
    # a failed command is changed too, as Ansible's command module reports it
    assert shown == {"changed": "110", "change": "110", "failed": "010", "failure": "010", "success": "101",
                     "succeeded": "101", "successful": "101", "skipped": "001", "skip": "001", "reachable": "111",
                     "unreachable": "000"}, shown


def test_ansibles_other_tests_match_search_regex_version_contains_subset(tmp_path):
    exprs = ["'abc' is match('a.c')", "'xabc' is match('abc')", "'xabc' is search('ab')", "'ABC' is search('b', ignorecase=true)",
             "'abc' is regex('^abc$', match_type='fullmatch')", "'2.10.1' is version('2.9', '>')",
             "'1.0' is version('1.0.0', 'lt')", "'3.12' is version_compare('3.12', '==')", "[1, 2] is contains(2)",
             "[1] is subset([1, 2])", "[1, 2] is superset([3])"]
    tasks = [{"name": "t", "debug": {"msg": " ".join(f"{{{{ ({e}) | int }}}}" for e in exprs)}}]
    path = tmp_path / "pb.yaml"
    path.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": tasks}], sort_keys=False))
    res = run_playbook(str(path), inventory=INV)
    assert res.exit_code == 0, res.tasks
    assert res.results[0].msg == "1 0 1 1 1 1 1 1 1 1 0"
