"""A task that leaves out a module's required argument fails on its host when it runs, as Ansible's (so
ignore_errors and register see it), instead of stopping the playbook at load; compared with real ansible-playbook
(tests/engine/run/test_play_flow.py)."""

from __future__ import annotations

from tests.engine.run.test_play_flow import log_task, same


def test_a_missing_dest_fails_the_host_and_ignore_errors_keeps_going(tmp_path):
    play = {"hosts": "a", "tasks": [
        log_task("before"),
        {"name": "no dest", "copy": {"content": "x"}, "ignore_errors": True, "register": "r"},
        log_task("seen", when="r is failed and 'dest is required' in r.msg"),
        {"name": "no dest again", "copy": {"content": "x"}},
        log_task("not-reached")]}
    assert same(tmp_path, play) == {"a": ["before", "seen"]}


def test_an_internal_option_the_module_lacks_fails_the_host_when_it_runs(tmp_path):
    play = {"hosts": "a", "tasks": [
        log_task("before"),
        {"name": "peek", "copy": {"content": "x", "dest": str(tmp_path / "f"), "_diff_peek": True},
         "ignore_errors": True, "register": "r"},
        log_task("seen", when="r is failed and '_diff_peek' in r.msg")]}
    assert same(tmp_path, play) == {"a": ["before", "seen"]}


def test_an_empty_copy_src_fails_with_ansibles_words(tmp_path):
    play = {"hosts": "a", "tasks": [
        {"name": "empty src", "copy": {"src": "", "dest": str(tmp_path / "d")}, "ignore_errors": True, "register": "r"},
        log_task("seen", when="r is failed and 'src (or content) is required' in r.msg")]}
    assert same(tmp_path, play) == {"a": ["seen"]}
