"""systemd_service, systemd and service (use: systemd) against real ansible-core's, on a stand-in systemctl.

This machine runs no systemd (PID 1 is not systemd), so both sides' systemctl is tests/library/_fake_systemctl.py,
put first on PATH through the task's `environment` (an outer-boundary stand-in: it keeps units' active and
enabled states in a JSON file, one per side, and answers as systemctl does). The same sequence of tasks runs by
ansible-playbook and by us; compared per task: failed, changed, msg, every field Ansible returns (status, the
parsed `systemctl show`, included); then both stand-ins' final unit states and daemon-reload counts. Also ours
only: service with use auto on a host without systemd is refused with a clear message."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml
from _ansible_side import registered_by_ansible, registered_by_ours, same_flags

from engine.api import run_playbook
from tests.helpers import required_ansible_tool

HERE = Path(__file__).resolve().parent
SEQUENCE = [
    ("daemon-reload-only", {"systemd_service": {"daemon_reload": True}}),
    ("nothing-asked", {"systemd_service": {"name": "web"}}),
    ("state-without-name", {"systemd_service": {"state": "started"}}),
    ("glob", {"systemd_service": {"name": "web*", "state": "started"}}),
    ("start-check", {"systemd_service": {"name": "web", "state": "started"}, "check_mode": True}),
    ("start", {"systemd_service": {"name": "web", "state": "started"}}),
    ("start-again", {"systemd_service": {"name": "web", "state": "started"}}),
    ("enable-check", {"systemd_service": {"name": "web", "enabled": True}, "check_mode": True}),
    ("enable", {"systemd_service": {"name": "web", "enabled": True, "daemon_reload": True}}),
    ("enable-again", {"systemd_service": {"name": "web", "enabled": True}}),
    ("restart", {"systemd": {"name": "web", "state": "restarted"}}),
    ("reload", {"systemd": {"name": "web.service", "state": "reloaded", "no_block": True}}),
    ("stop-check", {"systemd_service": {"name": "web", "state": "stopped"}, "check_mode": True}),
    ("stop-disable", {"systemd_service": {"name": "web", "state": "stopped", "enabled": False}}),
    ("mask", {"systemd_service": {"name": "web", "masked": True}}),
    ("start-masked", {"systemd_service": {"name": "web", "state": "started"}}),
    ("unmask", {"systemd_service": {"name": "web", "masked": False}}),
    ("missing-unit", {"systemd_service": {"name": "nope", "state": "started"}}),
    ("missing-unit-enable", {"systemd_service": {"name": "nope", "enabled": True}}),
    ("user-scope", {"systemd_service": {"name": "web", "state": "started", "scope": "user"}}),
    ("service-use-systemd", {"service": {"name": "web", "state": "stopped", "use": "systemd"}}),
    ("service-enable", {"service": {"name": "web", "enabled": True, "use": "systemd"}}),
]
FIRST = {"units": {"web.service": {"active": "inactive", "enabled": "disabled"}}}


def _fake_bin(folder: Path) -> Path:
    folder.mkdir()
    tool = folder / "systemctl"
    tool.write_text(f"#!/bin/sh\nexec {sys.executable} {HERE / '_fake_systemctl.py'} \"$@\"\n")
    tool.chmod(0o755)
    return folder


def _tasks(fake: Path, state: Path) -> list[tuple[str, dict]]:
    env = {"PATH": f"{fake}:/usr/bin:/bin", "FAKE_SYSTEMCTL_STATE": str(state)}
    return [(cid, dict(task, environment=env)) for cid, task in SEQUENCE]


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    work = tmp_path_factory.mktemp("systemd")
    fake = _fake_bin(work / "bin")
    states = {side: work / f"{side}.json" for side in ("ansible", "ours")}
    for path in states.values():
        path.write_text(json.dumps(FIRST))
    (work / "home").mkdir()
    theirs = registered_by_ansible(required_ansible_tool("ansible-playbook"), work / "home", work,
                                   _tasks(fake, states["ansible"]))
    return states, theirs, registered_by_ours(work / "ours.yaml", _tasks(fake, states["ours"]))


@pytest.mark.parametrize("cid", [c[0] for c in SEQUENCE])
def test_systemd_as_ansibles(both, cid):
    _states, theirs, ours = both
    t, o = theirs[cid], ours[cid]
    same_flags(t, o, "failed", "changed")
    if t.get("msg"):
        assert o.get("msg") == t["msg"], (t, o)
    keys = {k for k in t if not k.startswith("_ansible")} - {"invocation", "changed", "failed", "msg", "exception"}
    assert keys <= set(o), (sorted(keys - set(o)), t, o)
    for k in keys:
        assert o[k] == t[k], (k, t, o)


def test_units_left_alike(both):
    states, _t, _o = both
    theirs, ours = (json.loads(states[s].read_text()) for s in ("ansible", "ours"))
    assert ours["units"] == theirs["units"]
    assert ours.get("daemon-reload") == theirs.get("daemon-reload") == 2


def test_service_refused_without_systemd(tmp_path):
    from dflash_host.host import systemd
    if systemd.present():
        pytest.skip("this machine runs systemd")
    book = tmp_path / "book.yaml"
    book.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False,
                                     "tasks": [{"service": {"name": "web", "state": "started"}}]}]))
    run = run_playbook(str(book), inventory={"all": {"hosts": {"h": {"ansible_connection": "local"}}}})
    result = run.results[0].result
    assert result["failed"] and "does not run systemd" in result["msg"], result
