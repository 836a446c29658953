"""`meta` as Ansible users write it: flush_handlers runs the notified handlers there and then, end_host ends one
host's play (not a failure), end_play ends the play for every host, noop does nothing; anything else is refused
at load."""

from __future__ import annotations

import sys

import yaml

from engine.api import run_playbook

INV = {"all": {"hosts": {"a": {"ansible_connection": "local"}, "b": {"ansible_connection": "local"}}}}


def run(tmp_path, tasks, handlers=(), plays_after=()):
    path = tmp_path / "pb.yaml"
    plays = [{"hosts": "all", "gather_facts": False, "tasks": tasks, "handlers": list(handlers)}, *plays_after]
    path.write_text(yaml.safe_dump(plays, sort_keys=False))
    return run_playbook(str(path), inventory=INV)


def order(res):
    return [(t["host"], t["task"]) for t in res.tasks if t["status"] != "skipped"]


def test_flush_handlers_runs_the_notified_handler_before_the_next_task(tmp_path):
    tasks = [{"name": "change", "command": {"argv": ["true"]}, "notify": "h"},
             {"meta": "flush_handlers"},
             {"name": "after", "debug": {"msg": "x"}}]
    res = run(tmp_path, tasks, handlers=[{"name": "h", "debug": {"msg": "handled"}}])
    assert res.exit_code == 0, res.tasks
    names = [t["task"] for t in res.tasks if t["host"] == "a"]
    assert names == ["change", "meta", "h", "after"], names  # once: flushed, not again at the play's end


def test_end_host_ends_that_hosts_play_without_failing_it_and_the_next_play_runs(tmp_path):
    tasks = [{"meta": "end_host", "when": "inventory_hostname == 'a'"},
             {"name": "later", "debug": {"msg": "x"}}]
    res = run(tmp_path, tasks, plays_after=[{"hosts": "all", "gather_facts": False,
                                             "tasks": [{"name": "next play", "debug": {"msg": "y"}}]}])
    assert res.exit_code == 0, res.tasks
    ran = order(res)
    assert ("a", "later") not in ran and ("b", "later") in ran
    assert ("a", "next play") in ran and ("b", "next play") in ran
    assert res.recap["a"]["failed"] == 0


def test_end_play_ends_the_play_for_every_host_when_the_first_hosts_condition_holds(tmp_path):
    """As ansible-playbook runs it: end_play runs once, so the batch's first host's `when` decides."""
    for first_holds in (True, False):
        tasks = [{"name": "first", "debug": {"msg": "x"}},
                 {"meta": "end_play", "when": f"inventory_hostname == '{'a' if first_holds else 'b'}'"},
                 {"name": "later", "debug": {"msg": "x"}}]
        res = run(tmp_path, tasks)
        later = [t["host"] for t in res.tasks if t["task"] == "later"]
        assert res.exit_code == 0 and sorted(later) == ([] if first_holds else ["a", "b"]), (first_holds, res.tasks)
        assert res.recap["a"]["ok"] == (1 if first_holds else 2)  # the meta task itself is not counted


def test_noop_and_a_refused_action(tmp_path):
    assert run(tmp_path, [{"meta": "noop"}]).exit_code == 0
    bad = run(tmp_path, [{"meta": "refresh_inventory"}])
    assert bad.exit_code == 4 and "refresh_inventory" in bad.error and "flush_handlers" in bad.error, bad.error


def test_end_play_under_serial_ends_every_batch_and_end_batch_only_the_current_one(tmp_path):
    later = {"hosts": "all", "gather_facts": False, "tasks": [{"name": "next play", "debug": {"msg": "n"}}]}
    for action, expected in (
            ("end_play", [("a", "first"), ("a", "meta"), ("a", "next play"), ("b", "next play")]),
            ("end_batch", [("a", "first"), ("a", "meta"), ("b", "first"), ("b", "meta"), ("a", "next play"),
                           ("b", "next play")])):
        path = tmp_path / f"{action}.yaml"
        path.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "serial": 1, "tasks": [
            {"name": "first", "debug": {"msg": "1"}}, {"meta": action}, {"name": "never", "debug": {"msg": "x"}}]},
            later], sort_keys=False))
        res = run_playbook(str(path), inventory=INV)
        assert res.exit_code == 0, res.tasks
        # the next play runs both hosts at once: the order between them within its task is theirs to pick
        in_batches = [step for step in order(res) if step[1] != "next play"]
        assert in_batches + sorted(set(order(res)) - set(in_batches)) == expected, (action, order(res))


HELD = ("import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDONLY)\n"
        "try:\n    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\nexcept BlockingIOError:\n    print('held')\n"
        "else:\n    print('free')")


def test_reset_connection_gives_the_rest_of_the_run_a_new_worker_that_holds_the_host_lock(tmp_path):
    """Only where its `when` holds; the worker before it ends, and the lock it held is taken again by the new one."""
    inv = {"all": {"vars": {"dfp_root": str(tmp_path / "root")},
                   "hosts": {"a": {"ansible_connection": "local"}, "b": {"ansible_connection": "local"}}}}
    who = {"command": {"argv": ["sh", "-c", "echo $PPID"]}}
    lock = str(tmp_path / "root" / ".dflash-provision.lock")
    tasks = [{"name": "before", **who}, {"meta": "reset_connection", "when": "inventory_hostname == 'a'"},
             {"name": "after", **who},
             {"name": "lock", "command": {"argv": [sys.executable, "-c", HELD, lock]}, "when": "inventory_hostname == 'a'"}]
    path = tmp_path / "pb.yaml"
    path.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": tasks}], sort_keys=False))
    res = run_playbook(str(path), inventory=inv)
    assert res.exit_code == 0, res.tasks
    pid = {(r.host, r.task): r.result["stdout"] for r in res.results if r.task in ("before", "after")}
    assert pid["a", "before"] != pid["a", "after"] and pid["b", "before"] == pid["b", "after"], pid
    assert res.find("lock", "a")[0].result["stdout"] == "held"
    assert res.recap["a"]["ok"] == 3 and not res.recap["a"]["failed"]
