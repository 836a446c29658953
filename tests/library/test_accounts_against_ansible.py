"""user and group (library/user.py, library/group.py) against real ansible-core's, as root on this machine: the
same sequence of tasks (add, again, change, append, exact groups, check mode, a missing group, remove) run by
ansible-playbook on users and groups named dfta-* and by us on dfto-*; compared per task: failed, changed, and
every field Ansible returns with its value (names written as P-*, ids as what they are on each side). Every user
and group made is removed at the end."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _ansible_side import placed, registered_by_ansible, registered_by_ours, same_flags  # noqa: E402

from tests.helpers import required_ansible_tool  # noqa: E402

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="useradd and groupadd need root")
HASH = "$6$saltsalt$" + "a1B2c3D4e5" * 8 + "f6G7h8"  # a sha512-crypt-shaped hash (of no password)
SEQUENCE = [
    ("group-add", {"group": {"name": "P-g1"}}),
    ("group-again", {"group": {"name": "P-g1"}}),
    ("group-add-system", {"group": {"name": "P-g2", "system": True}}),
    ("group-check-remove", {"group": {"name": "P-g2", "state": "absent"}, "check_mode": True}),
    ("user-check-new", {"user": {"name": "P-u1"}, "check_mode": True}),
    ("user-add", {"user": {"name": "P-u1", "shell": "/bin/sh", "comment": "Test user", "groups": ["P-g1"],
                           "password": HASH}}),
    ("user-plain-password-warned", {"user": {"name": "P-u1", "password": "plain"}, "check_mode": True}),
    ("user-again", {"user": {"name": "P-u1", "shell": "/bin/sh", "comment": "Test user", "groups": ["P-g1"],
                             "password": HASH}}),
    ("user-append", {"user": {"name": "P-u1", "groups": ["P-g2"], "append": True}}),
    ("user-append-again", {"user": {"name": "P-u1", "groups": "P-g2", "append": True}}),
    ("user-exact-groups", {"user": {"name": "P-u1", "groups": ["P-g1"]}}),
    ("user-shell-check", {"user": {"name": "P-u1", "shell": "/bin/bash"}, "check_mode": True}),
    ("user-shell", {"user": {"name": "P-u1", "shell": "/bin/bash"}}),
    ("user-no-groups", {"user": {"name": "P-u1", "groups": []}}),
    ("user-missing-group", {"user": {"name": "P-u1", "group": "P-nope"}}),
    ("user-system-no-home", {"user": {"name": "P-s1", "system": True, "create_home": False}}),
    ("user-remove", {"user": {"name": "P-u1", "state": "absent", "remove": True}}),
    ("user-remove-again", {"user": {"name": "P-u1", "state": "absent"}}),
    ("user-remove-system", {"user": {"name": "P-s1", "state": "absent"}}),
    ("group-remove", {"group": {"name": "P-g1", "state": "absent"}}),
    ("group-remove-2", {"group": {"name": "P-g2", "state": "absent"}}),
    ("group-remove-again", {"group": {"name": "P-g2", "state": "absent"}}),
]
SIDE_DEPENDENT = {"uid", "gid", "group"}  # ids the system picks for each side's own names


def _named(value, prefix: str):
    return placed(value, {"P-": prefix + "-"})


def _cleanup(prefix: str) -> None:
    for name in ("u1", "s1"):
        subprocess.run(["userdel", "-r", f"{prefix}-{name}"], capture_output=True)
    for name in ("g1", "g2"):
        subprocess.run(["groupdel", f"{prefix}-{name}"], capture_output=True)


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    work = tmp_path_factory.mktemp("accounts")
    (work / "home").mkdir()
    for prefix in ("dfta", "dfto"):
        _cleanup(prefix)
    try:
        theirs = registered_by_ansible(required_ansible_tool("ansible-playbook"), work / "home", work,
                                       [(cid, _named(t, "dfta")) for cid, t in SEQUENCE])
        ours = registered_by_ours(work / "ours.yaml", [(cid, _named(t, "dfto")) for cid, t in SEQUENCE])
    finally:
        for prefix in ("dfta", "dfto"):
            _cleanup(prefix)
    return theirs, ours


@pytest.mark.parametrize("cid", [c[0] for c in SEQUENCE])
def test_accounts_as_ansibles(both, cid):
    theirs, ours = both
    t, o = _named(theirs[cid], "P"), _named(ours[cid], "P")
    t, o = ({k: (v.replace("dfta", "P") if isinstance(v, str) else v) for k, v in t.items()},
            {k: (v.replace("dfto", "P") if isinstance(v, str) else v) for k, v in o.items()})
    same_flags(t, o, "failed", "changed")
    if t.get("failed"):
        assert o["msg"].startswith(t["msg"]), (t["msg"], o["msg"])
        return
    keys = set(t) - {"invocation", "changed", "failed", "msg", "_ansible_no_log"}
    assert keys <= set(o), (sorted(keys - set(o)), t, o)
    for k in keys - SIDE_DEPENDENT - {"stdout", "stderr", "stdout_lines", "stderr_lines", "password"}:
        assert o[k] == t[k], (k, t, o)
    if "password" in t:  # Ansible's placeholder; the engine masks a password-named field as well
        assert o["password"] in ("NOT_LOGGING_PASSWORD", "********"), o
    assert HASH not in str(o)
