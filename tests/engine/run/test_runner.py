"""The runner over real transports: local and a real sshd. Keywords, handlers, idempotency, reports."""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET

import pytest
import yaml

from engine.api import run_playbook


def _playbook(path, tasks, handlers=None, **play):
    play = dict({"hosts": "all", "gather_facts": False, "tasks": tasks}, **play)
    if handlers:
        play["handlers"] = handlers
    path.write_text(yaml.safe_dump([play], sort_keys=False))
    return path


KEYWORD_TASKS = [
    {"name": "Make the folders", "file": {"path": "{{ base }}/{{ item }}", "state": "directory"},
     "loop": ["a", "b"], "register": "dirs", "notify": "note it"},
    {"name": "Check the loop registered both", "assert": {"that": ["dirs.results | length == 2"]}},
    {"name": "Skipped by when", "file": {"path": "{{ base }}/never", "state": "directory"}, "when": "dirs.results | length > 5"},
    {"name": "Forced changed", "debug": {"msg": "x"}, "changed_when": "false"},
    {"name": "Failure accepted", "fail": {"msg": "boom"}, "failed_when": False},
    {"name": "Failure ignored", "fail": {"msg": "ignored"}, "ignore_errors": True},
    {"name": "Tagged only", "file": {"path": "{{ base }}/tagged", "state": "directory"}, "tags": ["extra"]},
]
HANDLERS = [{"name": "note it", "file": {"path": "{{ base }}/handler-ran", "state": "directory"}}]


def test_keywords_and_handlers_then_second_run_reports_no_change(target, tmp_path):
    inv, base = target
    pb = _playbook(tmp_path / "pb.yaml", KEYWORD_TASKS, HANDLERS, vars={"base": str(base / "out")})
    first = run_playbook(pb, inv, skip_tags=["extra"])
    assert first.exit_code == 0, first.tasks
    host = next(iter(first.recap))
    assert first.recap[host]["changed"] == 2  # the loop and the handler
    assert first.recap[host]["skipped"] == 1
    assert (base / "out" / "a").is_dir() and (base / "out" / "handler-ran").is_dir()
    assert not (base / "out" / "tagged").exists()
    assert [r.status for r in first.find("Failure ignored")] == ["failed"] and first.find("Failure ignored")[0].ignored
    second = run_playbook(pb, inv, skip_tags=["extra"])
    assert second.exit_code == 0 and second.recap[host]["changed"] == 0
    assert not second.find("note it")  # a handler runs only when notified


def test_check_mode_changes_nothing(target, tmp_path):
    inv, base = target
    pb = _playbook(tmp_path / "pb.yaml", KEYWORD_TASKS[:1], HANDLERS, vars={"base": str(base / "chk")})
    res = run_playbook(pb, inv, check=True)
    assert res.exit_code == 0
    assert next(iter(res.recap.values()))["changed"] == 2  # the loop, and its handler (also in check mode)
    assert not (base / "chk").exists()


def test_until_retries_until_condition_holds(target, tmp_path):
    inv, base = target
    marker = base / "count"
    tasks = [{"name": "Count attempts", "command": {"argv": ["sh", "-c", f"echo x >> {marker}; wc -l < {marker}"]},
              "register": "n", "until": "n.stdout | int >= 3", "retries": 5, "delay": 0}]
    res = run_playbook(_playbook(tmp_path / "pb.yaml", tasks), inv)
    assert res.exit_code == 0, res.tasks
    assert marker.read_text().count("x") == 3
    assert res.results[0].result["attempts"] == 3


def test_reports_json_and_junit(target, tmp_path):
    inv, base = target
    tasks = [{"name": "ok task", "debug": {"msg": "hi"}}, {"name": "failing task", "fail": {"msg": "it broke"}}]
    report, junit = tmp_path / "r.json", tmp_path / "r.xml"
    res = run_playbook(_playbook(tmp_path / "pb.yaml", tasks), inv, report=str(report), junit=str(junit))
    assert res.exit_code == 2
    data = json.loads(report.read_text())
    host = next(iter(data["recap"]))
    assert set(data["recap"][host]) >= {"ok", "changed", "failed", "skipped", "unreachable"}
    row = data["tasks"][-1]
    assert {k: row[k] for k in ("host", "task", "module", "status", "changed", "msg")} == {
        "host": host, "task": "failing task", "module": "fail", "status": "failed", "changed": False, "msg": "it broke"}
    assert "role" in row and isinstance(row["duration_s"], float)
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite.get("failures") == "1" and suite.get("tests") == "2"


def test_secrets_never_reach_reports(target, tmp_path):
    inv, base = target
    tasks = [{"name": "Leak attempt", "debug": {"msg": "token is {{ hf_token }}"}}]
    report = tmp_path / "r.json"
    res = run_playbook(_playbook(tmp_path / "pb.yaml", tasks, vars={"hf_token": "hf_SECRETVALUE123"}), inv, report=str(report))
    assert res.exit_code == 0
    assert "hf_SECRETVALUE123" not in report.read_text()
    assert "********" in report.read_text()


def test_dropped_worker_makes_the_host_unreachable_and_the_task_is_not_resent(target, tmp_path):
    """A task is sent at most once: after a dropped worker the host is out of the run (exit 3); the next run converges."""
    inv, base = target
    mark = base / "killed-once"
    runs = base / "runs"
    # The first run kills its own worker (the command's parent) mid-request; a resend would append a second line.
    tasks = [{"name": "Drop the worker once", "command": {"argv": ["sh", "-c", f"echo run >> {runs}; test -e {mark} || {{ touch {mark}; kill -9 $PPID; }}"]}},
             {"name": "Still talking", "debug": {"msg": "after"}}]
    res = run_playbook(_playbook(tmp_path / "pb.yaml", tasks), inv)
    assert mark.exists()
    assert res.exit_code == 3, res.tasks
    assert runs.read_text() == "run\n"
    assert [r.status for r in res.results] == ["unreachable"]
    assert "not sent again" in res.results[0].msg
    again = run_playbook(_playbook(tmp_path / "pb.yaml", tasks), inv)
    assert again.exit_code == 0, again.tasks
    # The killed worker died holding the host lock: the next run takes it over and says so.
    assert [(r.task, r.status) for r in again.results][0] == ("Host lock", "ok")
    assert "took over" in again.results[0].msg
    assert [r.status for r in again.results[1:]] == ["changed", "ok"]


@pytest.mark.ssh
def test_fanout_one_failing_one_unreachable_others_complete(ssh_hosts, inventory_file, shared_tmp, tmp_path):
    hosts = ssh_hosts[:8]
    inv = inventory_file(hosts=hosts, host_vars={"h3": {"must_fail": True}, "h8": {"ansible_host": "127.0.0.250", "dfp_connect_retries": 2}},
                         vars={"must_fail": False})
    tasks = [{"name": "Per-host folder", "file": {"path": f"{shared_tmp}/fan/{{{{ inventory_hostname }}}}", "state": "directory"}},
             {"name": "Fail where told", "fail": {"msg": "told to"}, "when": "must_fail"},
             {"name": "After", "file": {"path": f"{shared_tmp}/fan/{{{{ inventory_hostname }}}}-done", "state": "directory"}}]
    res = run_playbook(_playbook(tmp_path / "pb.yaml", tasks), inv, forks=8)
    assert res.exit_code == 2
    assert res.recap["h3"]["failed"] == 1 and res.recap["h8"]["unreachable"] == 1
    done = sorted(p.name for p in (shared_tmp / "fan").iterdir() if p.name.endswith("-done"))
    assert done == [f"h{i}-done" for i in (1, 2, 4, 5, 6, 7)]
    unreachable = res.find("Connecting", "h8") + [r for r in res.results if r.host == "h8"]
    assert "127.0.0.250" in unreachable[0].msg


@pytest.mark.ssh
def test_runtime_is_shipped_to_a_host_without_psutil(ssh_hosts, inventory_file, tmp_path):
    """The test user's python3 has no psutil; a module importing it must still run."""
    inv = inventory_file(hosts=ssh_hosts[:1])
    tasks = [{"name": "Facts need psutil", "stat": {"path": "/"}}]
    res = run_playbook(_playbook(tmp_path / "pb.yaml", tasks, gather_facts=True), inv)
    assert res.exit_code == 0, res.tasks
    facts_row = res.find("Gathering facts")[0]
    assert facts_row.status == "ok"
    home = os.path.expanduser(f"~{ssh_hosts[0].user}")
    assert os.path.isdir(os.path.join(home, ".cache", "dflash-provision", "runtime"))


def test_when_may_use_the_loop_variable(inventory_file, tmp_path, shared_tmp):
    inv = inventory_file(local=True)
    tasks = [{"name": "Only the wanted items", "file": {"path": f"{shared_tmp}/{{{{ item }}}}", "state": "directory"},
              "loop": ["keep", "skip"], "when": "item != 'skip'"}]
    res = run_playbook(_playbook(tmp_path / "pb.yaml", tasks), inv)
    assert res.exit_code == 0, res.tasks
    assert (shared_tmp / "keep").is_dir() and not (shared_tmp / "skip").exists()


def test_groups_and_hostvars_are_available(inventory_file, tmp_path):
    inv = inventory_file(local=True, groups={"gpu": ["local"]}, host_vars={"local": {"port": 8011}})
    tasks = [{"name": "Magic variables", "assert": {"that": ["groups['gpu'] == ['local']", "hostvars['local'].port == 8011"]}}]
    res = run_playbook(_playbook(tmp_path / "pb.yaml", tasks), inv)
    assert res.exit_code == 0, res.tasks


def test_secrets_are_masked_in_diffs_and_warnings_but_registered_intact(inventory_file, tmp_path, shared_tmp):
    inv = inventory_file(local=True)
    secret = "hf_TOPSECRET_42"
    dest = shared_tmp / "env"
    tasks = [{"name": "Write a file holding the token", "copy": {"content": "HF_TOKEN={{ hf_token }}\n", "dest": str(dest)},
              "register": "written"},
             {"name": "The registered result still works", "assert": {"that": ["written.changed"]}}]
    report = tmp_path / "r.json"
    res = run_playbook(_playbook(tmp_path / "pb.yaml", tasks, vars={"hf_token": secret}), inv, diff=True, report=str(report))
    assert res.exit_code == 0, res.tasks
    assert dest.read_text() == f"HF_TOKEN={secret}\n"
    shown = json.dumps([r.result for r in res.results]) + report.read_text()
    assert secret not in shown


def _uniquely_named_python(tmp_path, name: str) -> str:
    """A link to python3 whose processes can be found by name (psutil), in folders any user may enter."""
    import shutil

    link_dir = tmp_path / "py"
    link_dir.mkdir()
    link_dir.chmod(0o755)
    tmp_path.chmod(0o755)
    python = link_dir / name
    python.symlink_to(shutil.which("python3"))
    return str(python)


def _processes_of(name: str) -> list[int]:
    import psutil

    return [p.pid for p in psutil.process_iter(["cmdline"]) if any(name in part for part in p.info["cmdline"] or [])]


def test_close_early_ends_the_workers_of_a_run_the_checks_refused_while_their_clients_are_still_held(tmp_path):
    """The explicit close, not the garbage collection of a dropped client: the test holds every client."""
    import time
    from concurrent.futures import ThreadPoolExecutor

    from engine.api import _plan

    python = _uniquely_named_python(tmp_path, "python3-close-early-test")
    inv = {"all": {"hosts": {h: {"ansible_connection": "local", "ansible_python_interpreter": python} for h in "ab"}}}
    book = _playbook(tmp_path / "pb.yaml", [{"name": "Would run", "debug": {"msg": "x"}}])
    _, plays, runner, _ = _plan(book, inv, None, None, None, None, {})
    with ThreadPoolExecutor(2) as pool:
        runner.hosts.connect_early(plays, runner.hosts_for, pool)
        held = [future.result(timeout=60) for future in runner.hosts._early.values()]
        assert len(held) == 2 and len(_processes_of("python3-close-early-test")) == 2
        runner.hosts.close_early()
        deadline = time.monotonic() + 10
        while _processes_of("python3-close-early-test") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _processes_of("python3-close-early-test") == [] and len(held) == 2


def test_a_refused_playbook_leaves_no_worker_from_the_early_connection(ssh_hosts, inventory_file, tmp_path):
    """Hosts are reached while the playbook is checked; when the checks refuse it (exit 4), those workers are
    closed and nothing ran there. The host's python is a uniquely named link so its processes can be found."""
    import time

    python = _uniquely_named_python(tmp_path, "python3-early-connect-test")
    inv = inventory_file(hosts=ssh_hosts[:2], vars={"ansible_python_interpreter": python})
    marker = tmp_path / "never"
    tasks = [{"name": "Would run", "file": {"path": str(marker), "state": "directory"}},
             {"name": "Undefined", "debug": {"msg": "{{ no_such_variable }}"}}]
    res = run_playbook(_playbook(tmp_path / "pb.yaml", tasks), inv)
    assert res.exit_code == 4 and "no_such_variable" in res.error
    assert not marker.exists()
    # An early connect still in flight when the run returns is closed once it is made: its worker may appear after
    # the return and go soon after. Done when none has been seen for 3 s (30 s at most).
    deadline = time.monotonic() + 30
    last_seen = time.monotonic()
    while time.monotonic() < deadline and time.monotonic() - last_seen < 3:
        if _processes_of("python3-early-connect-test"):
            last_seen = time.monotonic()
        time.sleep(0.1)
    assert _processes_of("python3-early-connect-test") == []


def test_a_variable_read_only_through_default_may_be_undefined(tmp_path):
    """`{{ x | default(...) }}` is fine without x (as in Ansible); a bare `{{ x }}` elsewhere still stops the run."""
    inv = {"all": {"hosts": {"local": {"ansible_connection": "local"}}}}
    guarded = [{"name": "Guarded", "debug": {"msg": "{{ not_set | default('fallback') }} {{ also_not | d(omit) }}"}}]
    res = run_playbook(_playbook(tmp_path / "ok.yaml", guarded), inv)
    assert res.exit_code == 0, res.error or res.tasks
    assert "fallback" in res.find("Guarded")[0].msg
    bare = guarded + [{"name": "Bare", "debug": {"msg": "{{ not_set }}"}}]
    res = run_playbook(_playbook(tmp_path / "bad.yaml", bare), inv)
    assert res.exit_code == 4 and "not_set" in res.error
