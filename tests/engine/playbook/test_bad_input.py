"""Bad input through the real CLI: one clear paragraph, exit non-zero, no traceback, nothing changed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]


def invoke(*args, cwd=ROOT):
    proc = subprocess.run([sys.executable, "-m", "invoke", *args], cwd=cwd, capture_output=True, text=True, timeout=120)
    return proc.returncode, proc.stdout + proc.stderr


def _setup(tmp_path, tasks, inv=None, play=None):
    marker = tmp_path / "changed-marker"
    first = {"name": "Would change the host", "file": {"path": str(marker), "state": "directory"}}
    pb = tmp_path / "pb.yaml"
    pb.write_text(yaml.safe_dump([dict({"hosts": "all", "gather_facts": False, "tasks": [first, *tasks]}, **(play or {}))], sort_keys=False))
    invp = tmp_path / "inv.yaml"
    invp.write_text(yaml.safe_dump(inv or {"all": {"hosts": {"local": {"ansible_connection": "local"}}}}))
    return pb, invp, marker


def assert_clean_error(code, out, marker, *needles, exit_code=4):
    assert code == exit_code, out
    assert "Traceback" not in out, out
    for n in needles:
        assert n in out, f"{n!r} not in:\n{out}"
    assert marker is None or not marker.exists(), "a bad input must change nothing"


def test_malformed_yaml_names_file_line_column(tmp_path):
    pb, invp, _ = _setup(tmp_path, [])
    pb.write_text("- hosts: all\n  tasks:\n    - name: x\n      file: {path: /tmp/x\n")
    code, out = invoke("play", str(pb), "-i", str(invp))
    assert_clean_error(code, out, None, "pb.yaml:", "malformed YAML")
    assert any(f"pb.yaml:{n}:" in out for n in (4, 5)), out


@pytest.mark.parametrize(
    "task,needles",
    [
        ({"name": "t", "nosuchmodule": {"a": 1}}, ["unknown module 'nosuchmodule'", "available modules:"]),
        ({"name": "t", "file": {"path": "/tmp/x"}, "wen": "true"}, ["unknown task keyword or module 'wen'"]),
        ({"name": "t", "file": {"path": "/tmp/x", "bogus": 1}}, ["module 'file' has no argument(s) bogus", "it accepts:"]),
        ({"name": "t", "file": {"path": "/tmp/x", "recurse": [1]}}, ["argument 'recurse' must be bool"]),
        ({"name": "t", "file": {"path": "/tmp/x", "state": "dir"}}, ["argument 'state' is 'dir'", "choose one of"]),
        ({"name": "Uses a var", "file": {"path": "{{ not_defined_anywhere }}/x"}}, ["('Uses a var')", "variable 'not_defined_anywhere' is undefined", "-e not_defined_anywhere="]),
    ],
)
def test_task_errors_are_caught_before_any_host_changes(tmp_path, task, needles):
    pb, invp, marker = _setup(tmp_path, [task])
    code, out = invoke("play", str(pb), "-i", str(invp))
    assert_clean_error(code, out, marker, "pb.yaml: task 2", *needles)


def test_unknown_role_lists_available(tmp_path):
    pb, invp, marker = _setup(tmp_path, [], play={"roles": ["no-such-role"]})
    code, out = invoke("play", str(pb), "-i", str(invp))
    assert_clean_error(code, out, marker, "unknown role 'no-such-role'", "available roles:")


def test_unknown_host_and_group(tmp_path):
    pb, invp, marker = _setup(tmp_path, [])
    code, out = invoke("play", str(pb), "-i", str(invp), "--host", "gpu9")
    assert_clean_error(code, out, marker, "'gpu9' matches no host or group", "hosts: local")
    code, out = invoke("play", str(pb), "-i", str(invp), "--group", "nogroup")
    assert_clean_error(code, out, marker, "'nogroup' matches no host or group")


def test_bad_extra_var(tmp_path):
    pb, invp, marker = _setup(tmp_path, [])
    code, out = invoke("play", str(pb), "-i", str(invp), "-e", "novalue")
    assert_clean_error(code, out, marker, "extra variables are KEY=VALUE")


def test_extra_vars_are_typed_and_win(tmp_path):
    pb, invp, _ = _setup(tmp_path, [{"name": "check", "assert": {"that": ["port == 8001", "ids == [1, 2]"]}}])
    code, out = invoke("play", str(pb), "-i", str(invp), "-e", "port=8001", "-e", "ids=[1,2]")
    assert code == 0, out


@pytest.mark.ssh
def test_unreachable_host_is_clear(tmp_path, ssh_hosts):
    h = ssh_hosts[0]
    inv = {"all": {"hosts": {"dead": dict(h.inventory_vars(), ansible_host="127.0.0.251", dfp_connect_retries=1)}}}
    pb, invp, marker = _setup(tmp_path, [], inv=inv)
    code, out = invoke("play", str(pb), "-i", str(invp))
    assert_clean_error(code, out, marker, "fatal: [dead]: UNREACHABLE! => {", f"127.0.0.251:{h.port}", "Connection refused", exit_code=3)


@pytest.mark.ssh
def test_changed_host_key_is_refused(tmp_path, sshd_pool):
    # A server on a new address whose known_hosts entry holds the key of another server.
    addr = "127.0.0.60"
    proc, _ = sshd_pool.start_extra(addr)
    try:
        h = sshd_pool.hosts[0]
        known = tmp_path / "known_hosts"
        good = Path(h.known_hosts).read_text().splitlines()[0].split(" ", 1)[1]
        known.write_text(f"[{addr}]:{h.port} {good}\n")
        inv = {"all": {"hosts": {"moved": dict(h.inventory_vars(), ansible_host=addr, ansible_ssh_known_hosts_file=str(known))}}}
        pb, invp, marker = _setup(tmp_path, [], inv=inv)
        code, out = invoke("play", str(pb), "-i", str(invp))
        assert_clean_error(code, out, marker, "CHANGED", "ssh-keygen -R", exit_code=3)
        # An unknown host is refused too, unless the inventory allows it.
        known.write_text("")
        code, out = invoke("play", str(pb), "-i", str(invp))
        assert_clean_error(code, out, marker, "is unknown", "refusing to connect", exit_code=3)
    finally:
        proc.terminate()
        proc.wait()


def test_inventory_cli_prints_ansible_like_json(tmp_path):
    import json

    _, invp, _ = _setup(tmp_path, [], inv={"all": {"vars": {"x": 1}, "children": {"g": {"hosts": {"a": {"y": 2}}}}}})
    code, out = invoke("inventory", "--list", "-i", str(invp))
    assert code == 0, out
    data = json.loads(out)
    assert data["_meta"]["hostvars"]["a"] == {"x": 1, "y": 2} and data["g"]["hosts"] == ["a"]
    code, out = invoke("inventory", "--host", "a", "-i", str(invp))
    assert json.loads(out) == {"x": 1, "y": 2}


@pytest.mark.parametrize(
    "task,needles",
    [
        ({"name": "t", "debug": {"msg": "x"}, "loop": [1], "loop_control": "item2"}, ["'loop_control' must be a mapping"]),
        ({"name": "t", "debug": {"msg": "x"}, "register": ["a"]}, ["'register' must be a variable name"]),
    ],
)
def test_malformed_task_keywords_are_clear(tmp_path, task, needles):
    pb, invp, marker = _setup(tmp_path, [task])
    code, out = invoke("play", str(pb), "-i", str(invp))
    assert_clean_error(code, out, marker, *needles)
