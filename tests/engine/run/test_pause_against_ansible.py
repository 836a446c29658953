"""pause (engine/run/actions/control.py) against real ansible-playbook without a terminal: seconds (at least 1),
minutes given as 0, a prompt with no time (not waited for), both minutes and seconds (refused); compared: failed,
changed, the fields Ansible returns and their shapes (stdout's words, delta, user_input, echo, rc)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "library"))
from _ansible_side import registered_by_ansible, registered_by_ours, same_flags  # noqa: E402

from tests.helpers import required_ansible_tool  # noqa: E402

CASES = [
    ("seconds", {"pause": {"seconds": 1}}),
    ("under-a-second", {"pause": {"seconds": 0}}),
    ("prompt-no-tty", {"pause": {"prompt": "Go on?"}}),
    ("echo-false", {"pause": {"prompt": "secret", "echo": False}}),
    ("both", {"pause": {"seconds": 1, "minutes": 1}}),
    ("one-line", {"pause": "seconds=1"}),
]


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    work = tmp_path_factory.mktemp("pause")
    (work / "home").mkdir()
    theirs = registered_by_ansible(required_ansible_tool("ansible-playbook"), work / "home", work, CASES)
    started = time.monotonic()
    ours = registered_by_ours(work / "ours.yaml", CASES)
    return theirs, ours, time.monotonic() - started


@pytest.mark.parametrize("cid", [c[0] for c in CASES])
def test_pause_answers_as_ansibles(both, cid):
    theirs, ours, _took = both
    t, o = theirs[cid], ours[cid]
    same_flags(t, o, "failed")
    if t.get("failed"):
        assert o["msg"] == t["msg"]
        return
    for key in ("changed", "rc", "delta", "user_input", "echo", "stderr"):
        assert o.get(key) == t.get(key), (key, t, o)
    assert o["stdout"].split(" ")[:2] == t["stdout"].split(" ")[:2] and o["stdout"].split()[-1] == t["stdout"].split()[-1]
    assert set(t) - {"invocation", "_ansible_no_log", "failed"} <= set(o), (t, o)


def test_the_pauses_were_slept(both):
    assert both[2] >= 3  # three one-second pauses (seconds 0 is one second too)
