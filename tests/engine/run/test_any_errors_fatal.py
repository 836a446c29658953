"""any_errors_fatal, as in Ansible: one host failing (or unreachable) stops the play for every host once that task
has finished everywhere. On real sshd hosts (h1..h3) with marker files proving what ran; blocks on local hosts."""

from __future__ import annotations

import io
import json
import os

import pytest
import yaml

from engine.api import run_playbook
from engine.report.console import Console


def touch(marks, what: str, fail_on: str | None = None) -> dict:
    """A command writing <marks>/<host>.<what>, failing afterwards on host `fail_on`."""
    test = f"; test {{{{ inventory_hostname }}}} != {fail_on}" if fail_on else ""
    return {"argv": ["sh", "-c", f"touch {marks}/{{{{ inventory_hostname }}}}.{what}{test}"]}


def playbook(path, marks, fatal: bool | None, gather_facts: bool = False):
    play = {
        "name": "cluster",
        "hosts": "all",
        "gather_facts": gather_facts,
        "tasks": [
            {"name": "start", "command": touch(marks, "start"), "notify": "handler"},
            {"name": "h2 breaks", "command": touch(marks, "second", fail_on="h2")},
            {"name": "later", "command": touch(marks, "later")},
            {"name": "hosts left", "debug": {"msg": "{{ ansible_play_hosts | join(',') }}"}},
        ],
        "handlers": [{"name": "handler", "command": touch(marks, "handler")}],
    }
    if fatal is not None:
        play["any_errors_fatal"] = fatal
    path.write_text(yaml.safe_dump([play, {"name": "next", "hosts": "all", "gather_facts": False,
                                           "tasks": [{"name": "next play", "command": touch(marks, "next")}]}]))
    return path


@pytest.fixture
def trio(ssh_hosts, inventory_file, shared_tmp):
    """write(**h2 vars) -> (inventory of h1..h3, each with its own dfp_root, marks folder)."""
    marks = shared_tmp / "marks"
    marks.mkdir()
    os.chmod(marks, 0o777)

    def write(**h2):
        host_vars = {h.name: {"dfp_root": str(shared_tmp / h.name)} for h in ssh_hosts[:3]}
        host_vars["h2"].update(h2)
        return inventory_file(hosts=ssh_hosts[:3], host_vars=host_vars), marks

    return write


def made(marks, what: str) -> list[str]:
    return sorted(p.name.split(".")[0] for p in marks.glob(f"*.{what}"))


def run(pb, inv, tmp_path):
    out, report = io.StringIO(), tmp_path / "r.json"
    res = run_playbook(pb, inv, console=Console(stream=out), report=str(report))
    return res, out.getvalue(), json.loads(report.read_text())


@pytest.mark.ssh
def test_a_failure_on_one_host_stops_every_host_after_that_task(tmp_path, trio):
    inv, marks = trio()
    res, out, report = run(playbook(tmp_path / "pb.yaml", marks, True), inv, tmp_path)
    assert res.exit_code == 2, out
    assert made(marks, "second") == ["h1", "h2", "h3"]  # the failing task finished on every host
    assert made(marks, "later") == [] and made(marks, "handler") == [] and made(marks, "next") == []
    stopped = res.find("Play stopped")
    assert [r.host for r in stopped] == ["h1", "h3"] and {r.status for r in stopped} == {"skipped"}
    msg = stopped[0].msg
    assert "any_errors_fatal" in msg and "host h2 failed task 'h2 breaks'" in msg and "Plays not run: next" in msg
    assert msg in out and [t["host"] for t in report["tasks"] if t["task"] == "Play stopped"] == ["h1", "h3"]
    assert res.recap["h1"]["failed"] == 0 and res.recap["h2"]["failed"] == 1


@pytest.mark.ssh
def test_an_unreachable_host_stops_the_play_before_any_task(tmp_path, trio):
    inv, marks = trio(ansible_port=1)
    res, out, _ = run(playbook(tmp_path / "pb.yaml", marks, True, gather_facts=True), inv, tmp_path)
    assert res.exit_code == 3, out  # as any run whose only trouble is an unreachable host
    assert made(marks, "start") == [] and made(marks, "next") == []
    stopped = res.find("Play stopped")
    assert [r.host for r in stopped] == ["h1", "h3"]
    assert "host h2 was unreachable at task 'Gathering facts'" in stopped[0].msg and stopped[0].msg in out


@pytest.mark.ssh
def test_without_the_keyword_the_other_hosts_go_on(tmp_path, trio):
    inv, marks = trio()
    res, out, _ = run(playbook(tmp_path / "pb.yaml", marks, None), inv, tmp_path)
    assert res.exit_code == 2, out
    assert made(marks, "later") == ["h1", "h3"] and made(marks, "handler") == ["h1", "h3"]
    assert made(marks, "next") == ["h1", "h3"]
    assert not res.find("Play stopped")
    assert {r.host: r.msg for r in res.find("hosts left")} == {"h1": "h1,h3", "h3": "h1,h3"}


# -- blocks and load-time checks, on local hosts -----------------------------------------------------------
def local_play(tmp_path, tasks, **play):
    hosts = {h: {"ansible_connection": "local"} for h in ("a", "b", "c")}
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    pb = tmp_path / "pb.yaml"
    pb.write_text(yaml.safe_dump([dict({"hosts": "all", "gather_facts": False, "tasks": tasks}, **play)]))
    return run_playbook(pb, inv)


B_FAILS = {"name": "b fails", "fail": {"msg": "no"}, "when": "inventory_hostname == 'b'"}
AFTER = {"name": "after", "debug": {"msg": "ran"}}


def test_a_rescued_failure_is_not_fatal(tmp_path):
    res = local_play(tmp_path, [{"block": [B_FAILS], "rescue": [{"name": "rescue", "debug": {"msg": "r"}}]}, AFTER],
                     any_errors_fatal=True)
    assert res.exit_code == 0, res.tasks
    assert [r.host for r in res.find("after")] == ["a", "b", "c"] and not res.find("Play stopped")


def test_a_failing_rescue_is_fatal(tmp_path):
    # every host enters the rescue (any_errors_fatal, as Ansible's); it fails on b only
    res = local_play(tmp_path, [{"block": [B_FAILS], "rescue": [{"name": "rescue", "fail": {"msg": "still no"},
                                                                 "when": "inventory_hostname == 'b'"}],
                                 "always": [{"name": "always", "debug": {"msg": "x"}}]}, AFTER], any_errors_fatal="yes")
    assert res.exit_code == 2
    assert not res.find("after")
    assert {r.host for r in res.find("always")} == {"a", "b", "c"}  # the always still runs, as Ansible's
    assert "host b failed task 'rescue'" in res.find("Play stopped")[0].msg


def test_a_block_or_task_may_ask_for_it_and_a_task_may_opt_out(tmp_path):
    res = local_play(tmp_path, [{"block": [B_FAILS], "any_errors_fatal": True}, AFTER])
    assert res.exit_code == 2 and not res.find("after") and [r.host for r in res.find("Play stopped")] == ["a", "c"]
    res = local_play(tmp_path, [dict(B_FAILS, any_errors_fatal=False), AFTER], any_errors_fatal=True)
    assert [r.host for r in res.find("after")] == ["a", "c"] and not res.find("Play stopped")


@pytest.mark.parametrize("where", ["play", "block", "task"])
def test_the_keyword_is_checked_when_the_playbook_loads(tmp_path, where):
    tasks = [dict(AFTER, any_errors_fatal="sometimes")] if where == "task" else [AFTER]
    if where == "block":
        tasks = [{"block": [AFTER], "any_errors_fatal": "sometimes"}]
    res = local_play(tmp_path, tasks, **({"any_errors_fatal": "sometimes"} if where == "play" else {}))
    assert res.exit_code == 4 and not res.results
    assert "'any_errors_fatal' must be true or false" in res.error and "any_errors_fatal: true" in res.error


def test_with_serial_the_batches_that_finished_are_not_named_as_stopped(tmp_path):
    hosts = {h: {"ansible_connection": "local"} for h in ("a", "b", "c")}
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    pb = tmp_path / "pb.yaml"
    pb.write_text(yaml.safe_dump([{"name": "roll", "hosts": "all", "gather_facts": False, "serial": 1,
                                   "any_errors_fatal": True, "tasks": [
                                       {"name": "b breaks", "command": {"argv": ["test", "{{ inventory_hostname }}", "!=", "b"]}}]}]))
    res = run_playbook(pb, inv)
    assert res.exit_code == 2
    stopped = res.find("Play stopped")
    assert [r.host for r in stopped] == ["c"]
    assert "stopped on: c." in stopped[0].msg and "host b failed task 'b breaks'" in stopped[0].msg
