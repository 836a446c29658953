"""What a host returns is data, never a template; every template renders in a sandbox.

Each case plants a Jinja2 payload that, rendered by a plain `jinja2.Environment`, runs a shell command
as the control node's user (it creates a marker file). The run must leave no marker, whichever way the
payload travels: a file a host returns, facts, an unprivileged user's file over SSH, -e, inventory.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import yaml

from engine.api import run_playbook


def payload(marker: Path) -> str:
    return (
        "{% for c in ''.__class__.__mro__[1].__subclasses__() %}{% if c.__name__ == 'catch_warnings' %}"
        f"{{{{ c()._module.__builtins__['__import__']('os').system('touch {marker}') }}}}"
        "{% endif %}{% endfor %}"
    )


def write_playbook(path: Path, tasks: list, gather_facts: bool = False, vars: dict | None = None) -> Path:
    play = {"hosts": "all", "gather_facts": gather_facts, "tasks": tasks}
    if vars:
        play["vars"] = vars
    path.write_text(yaml.safe_dump([play]))
    return path


def inventory(tmp_path: Path, host_vars: dict) -> Path:
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump({"all": {"hosts": {"h": host_vars}}}))
    return path


def messages(res, task: str) -> list[str]:
    return [t["msg"] for t in res.tasks if t["task"] == task]


@pytest.fixture
def marker(tmp_path):
    m = tmp_path / "pwned"
    yield m
    assert not m.exists(), "a template payload ran on the control node"


def test_registered_output_is_data(tmp_path, local_host, marker):
    evil = tmp_path / "evil.txt"
    evil.write_text(payload(marker))
    pb = write_playbook(tmp_path / "pb.yaml", [
        {"name": "read", "command": {"argv": ["cat", str(evil)]}, "register": "out", "changed_when": False},
        {"name": "length", "debug": {"msg": "{{ out.stdout | length }}"}},
        {"name": "verbatim", "debug": {"msg": "{{ out.stdout }}"}},
        {"name": "as fact", "set_fact": {"copied": "{{ out.stdout }}"}},
        {"name": "fact verbatim", "debug": {"msg": "{{ copied }}"}},
        {"name": "loop item", "debug": {"msg": "{{ item }}"}, "loop": "{{ [out.stdout] }}"},
    ])
    res = run_playbook(pb, inventory(tmp_path, local_host))
    assert res.exit_code == 0, res.tasks
    assert messages(res, "length") == [str(len(payload(marker)))]
    assert messages(res, "verbatim") == [payload(marker)]
    assert messages(res, "fact verbatim") == [payload(marker)]


def test_data_is_not_rendered_twice(tmp_path, local_host):
    """A host returning '{{ y }}' shows '{{ y }}', not the value of y."""
    pb = write_playbook(tmp_path / "pb.yaml", [
        {"name": "echo", "command": {"argv": ["printf", "%s", "{{ '{{' }} y }}"]}, "register": "out"},
        {"name": "show", "debug": {"msg": "{{ out.stdout }}"}},
    ], vars={"y": "rendered-again"})
    res = run_playbook(pb, inventory(tmp_path, local_host))
    assert res.exit_code == 0, res.tasks
    assert messages(res, "show") == ["{{ y }}"]


def test_facts_are_data(tmp_path, local_host, gpu, marker):
    gpu.configure(gpus=[{"name": payload(marker), "uuid": "GPU-1", "compute_cap": "9.0", "total_mib": 1000}])
    pb = write_playbook(tmp_path / "pb.yaml", [
        {"name": "count", "debug": {"msg": "{{ facts.gpus | length }} {{ facts.gpus[0].name | length }}"}},
    ], gather_facts=True)
    res = run_playbook(pb, inventory(tmp_path, dict(local_host, nvidia_smi=gpu.nvidia_smi)))
    assert res.exit_code == 0, res.tasks
    assert messages(res, "count") == [f"1 {len(payload(marker))}"]


PLANT = "import base64, sys; open(sys.argv[1], 'w').write(base64.b64decode(sys.argv[2]).decode())"


def b64(text: str) -> str:
    import base64

    return base64.b64encode(text.encode()).decode()


@pytest.mark.ssh
def test_file_of_an_unprivileged_remote_user_is_data(tmp_path, ssh_host, marker):
    """The ssh test user (not root) writes the payload on its host; root on the control node reads it."""
    remote = f"/tmp/dfp-evil-{os.getpid()}.txt"
    pb = write_playbook(tmp_path / "pb.yaml", [
        {"name": "plant", "command": {"argv": ["python3", "-c", PLANT, remote, b64(payload(marker))]}},
        {"name": "read", "command": {"argv": ["cat", remote]}, "register": "out"},
        {"name": "length", "debug": {"msg": "{{ out.stdout | length }}"}},
        {"name": "clean", "file": {"path": remote, "state": "absent"}},
    ])
    res = run_playbook(pb, inventory(tmp_path, ssh_host.inventory_vars()))
    assert res.exit_code == 0, res.tasks
    assert messages(res, "length") == [str(len(payload(marker)))]


@pytest.mark.parametrize("where", ["extra_vars", "inventory"])
def test_variable_values_render_only_in_the_sandbox(tmp_path, local_host, marker, where):
    evil = {"note": payload(marker)}
    pb = write_playbook(tmp_path / "pb.yaml", [{"name": "use", "debug": {"msg": "{{ note }}"}}])
    if where == "extra_vars":
        res = run_playbook(pb, inventory(tmp_path, local_host), extra_vars=evil)
    else:
        res = run_playbook(pb, inventory(tmp_path, dict(local_host, **evil)))
    assert res.exit_code == 2
    (msg,) = messages(res, "use")
    assert "sandbox refused" in msg and "__class__" in msg


@pytest.mark.parametrize(
    "expr, words",
    [
        ("{{ range(10 ** 9) | list | length }}", "range() of 1,000,000,000"),
        ("{{ ('x' * 1000000000) | length }}", "str of 1,000,000,000"),
        ("{{ ([1] * 100000000) | length }}", "list of 100,000,000"),
        ("{{ 2 ** 100000 }}", "exponent of 100000"),
        ("{{ lipsum.__globals__ }}", "__globals__"),
        ("{{ cycler.__init__.__globals__.os }}", "__init__"),
    ],
)
def test_sandbox_bounds(tmp_path, local_host, expr, words):
    pb = write_playbook(tmp_path / "pb.yaml", [{"name": "bomb", "debug": {"msg": expr}}])
    started = time.monotonic()
    res = run_playbook(pb, inventory(tmp_path, local_host))
    assert time.monotonic() - started < 20
    assert res.exit_code == 2
    (msg,) = messages(res, "bomb")
    assert "sandbox refused" in msg and words in msg, msg


def test_small_ranges_and_products_still_work(tmp_path, local_host):
    pb = write_playbook(tmp_path / "pb.yaml", [
        {"name": "fine", "debug": {"msg": "{{ range(3) | list | length }} {{ 'ab' * 2 }} {{ 2 ** 10 }}"}},
    ])
    res = run_playbook(pb, inventory(tmp_path, local_host))
    assert res.exit_code == 0, res.tasks
    assert messages(res, "fine") == ["3 abab 1024"]


def test_json_report_carries_data_verbatim(tmp_path, local_host, marker):
    evil = tmp_path / "evil.txt"
    evil.write_text(payload(marker))
    pb = write_playbook(tmp_path / "pb.yaml", [
        {"name": "read", "command": {"argv": ["cat", str(evil)]}, "register": "out"},
        {"name": "echo", "debug": {"msg": "{{ out.stdout }}"}},
    ])
    report = tmp_path / "r.json"
    res = run_playbook(pb, inventory(tmp_path, local_host), report=str(report))
    assert res.exit_code == 0
    assert payload(marker) in json.loads(report.read_text())["tasks"][-1]["msg"]


def test_inventory_text_reached_through_hostvars_is_rendered(tmp_path, local_host):
    """hostvars holds inventory values: template text from a trusted file, rendered when read (not host data)."""
    pb = write_playbook(tmp_path / "pb.yaml", [{"name": "other", "debug": {"msg": "{{ hostvars.h.joined }}"}}])
    res = run_playbook(pb, inventory(tmp_path, dict(local_host, joined="{{ 'a' ~ 'b' }}")))
    assert res.exit_code == 0, res.tasks
    assert messages(res, "other") == ["ab"]
