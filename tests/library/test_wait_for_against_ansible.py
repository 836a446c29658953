"""library/wait_for.py against real ansible-core's ansible.builtin.wait_for, on the same things: real listening
sockets (open, closed, one that opens and one that closes while the task waits, one that sends a banner, one
holding a connection for drained), files (present, absent, a dangling link, a folder, one that appears holding
the awaited text while the task waits), a regex with groups and named groups, a delay, a bare sleep; each timeout
one second.

Ansible's side is one ansible-playbook run (a looped task over the cases, tests/library/_ansible_side.py); ours
is `python3 -m library.wait_for ARGS.json [--check]` from the repository root per case: the cases that wait on
nothing moving run beside Ansible's run, the moving ones after it, each thing put back as it was first. What
moves is started by a trigger: a case just before waits for a trigger port, whose listener, on that connection,
does the thing a second later (so the next case is waiting when it happens).
Compared: state, port, path, search_regex, match_groups, match_groupdict, elapsed (a moving case's only within
its range: when the thing happens is not to the second), changed, failed, and the field names themselves, less
OURS_ONLY. msg: a failure's starts with Ansible's words (exactly Ansible's where the task gives msg); a success's
is ours (Ansible's has none). Where we differ on purpose DIFFERENCES says what each side does.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml
from _ansible_side import fields, run_ansible, run_ours

BANNER = b"SSH-2.0-OpenSSH_9.6 Ubuntu\r\n"
AFTER = 1.0  # seconds from a trigger to the thing it does


def listen(port: int = 0) -> socket.socket:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port))
    s.listen(16)
    return s


def free_port() -> int:
    with listen() as s:
        return s.getsockname()[1]


def serve(sock: socket.socket, on_connect) -> None:
    """Accept connections on sock until it closes, each handed to on_connect in a thread."""
    def loop():
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            threading.Thread(target=on_connect, args=(conn,), daemon=True).start()

    threading.Thread(target=loop, daemon=True).start()


def send_banner(conn: socket.socket) -> None:
    with conn:
        time.sleep(0.1)
        try:
            conn.sendall(BANNER)
        except OSError:
            pass


class World:
    """Everything the cases look at, made before the runs; put back as it was between Ansible's run and ours."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.socks: list[socket.socket] = []
        self.open_port = self._keep(listen()).getsockname()[1]
        self.closed_port = free_port()
        self.idle_port = self._keep(listen()).getsockname()[1]  # drained: nobody connected
        busy = self._keep(listen())
        self.busy_port = busy.getsockname()[1]  # drained: one connection held for the whole test
        self.client = self._keep(socket.create_connection(("127.0.0.1", self.busy_port)))
        self.accepted = self._keep(busy.accept()[0])
        banner = self._keep(listen())
        self.banner_port = banner.getsockname()[1]
        serve(banner, send_banner)
        (root / "file").write_text("x")
        (root / "dir").mkdir()
        (root / "log").write_text("INFO start\nmodel=qwen port=8000\nINFO Application startup complete.\n")
        (root / "dangling").symlink_to(root / "gone")
        # the moving things: a port that opens, one that closes, a file that appears with the awaited text
        self.opens_port = free_port()
        self.closes_port = self._keep(listen()).getsockname()[1]
        self.opened: list[socket.socket] = []
        self.triggers = {name: self._trigger(action) for name, action in (
            ("opens", self._open), ("closes", self._close), ("appears", self._appear))}

    def _keep(self, s: socket.socket) -> socket.socket:
        self.socks.append(s)
        return s

    def _trigger(self, action) -> int:
        sock = self._keep(listen())

        def fire(conn: socket.socket) -> None:
            conn.close()
            time.sleep(AFTER)
            action()

        serve(sock, fire)
        return sock.getsockname()[1]

    def _open(self) -> None:
        self.opened.append(self._keep(listen(self.opens_port)))

    def _close(self) -> None:
        for s in self.socks:
            if s.fileno() != -1 and s.getsockname()[1] == self.closes_port:
                s.close()

    def _appear(self) -> None:
        (self.root / "ready.log").write_text("booting\nREADY on port 8000\n")

    def reset(self) -> None:
        """The moving things as before Ansible's run."""
        for s in self.opened:
            s.close()
        self.opened.clear()
        self._keep(listen(self.closes_port))
        (self.root / "ready.log").unlink()

    def close(self) -> None:
        for s in self.socks:
            s.close()


# id, the arguments ("@open" and the like: World's ports; "@/NAME": a path under its root)
CASES = [
    ("port-open", {"port": "@open", "timeout": 5}),
    ("port-open-present", {"port": "@open", "state": "present", "timeout": 5}),
    ("port-closed-stopped", {"port": "@closed", "state": "stopped", "timeout": 5}),
    ("port-closed-absent", {"port": "@closed", "state": "absent", "timeout": 5}),
    ("port-timeout", {"port": "@closed", "timeout": 1, "connect_timeout": 1}),
    ("port-stopped-timeout", {"port": "@open", "state": "stopped", "timeout": 1}),
    ("banner", {"port": "@banner", "search_regex": "OpenSSH_(\\d)", "timeout": 5}),
    ("banner-timeout", {"port": "@banner", "search_regex": "nginx", "timeout": 1}),
    ("drained-idle", {"port": "@idle", "state": "drained", "timeout": 5}),
    ("drained-timeout", {"port": "@busy", "state": "drained", "timeout": 1}),
    ("drained-excluding-the-client", {"port": "@busy", "state": "drained", "exclude_hosts": ["127.0.0.1"],
                                      "timeout": 5}),
    ("drained-other-states", {"port": "@busy", "state": "drained", "active_connection_states": ["TIME_WAIT"],
                              "timeout": 5}),
    ("dir-present", {"path": "@/dir", "state": "present", "timeout": 5}),
    ("absent", {"path": "@/gone", "state": "absent", "timeout": 5}),
    ("dangling-link-absent", {"path": "@/dangling", "state": "absent", "timeout": 5}),
    ("path-timeout", {"path": "@/gone", "timeout": 1}),
    ("path-absent-timeout-msg", {"path": "@/file", "state": "absent", "timeout": 1, "msg": "the file stayed"}),
    ("regex-groups", {"path": "@/log", "search_regex": "model=(?P<model>\\w+) port=(\\d+)", "timeout": 5}),
    ("regex-multiline-anchor", {"path": "@/log", "search_regex": "^INFO (Application)", "timeout": 5}),
    ("regex-timeout", {"path": "@/log", "search_regex": "ERROR", "timeout": 1}),
    ("path-under-a-file", {"path": "@/file/child", "timeout": 5}),
    ("file-present-after-a-delay", {"path": "@/file", "delay": 1, "timeout": 5}),
    ("sleep-only", {"timeout": 1}),
    # what moves: the trigger, then the case that waits for what it does
    ("trigger-opens", {"port": "@trigger-opens", "timeout": 5}),
    ("port-opens", {"port": "@opens", "timeout": 10}),
    ("trigger-closes", {"port": "@trigger-closes", "timeout": 5}),
    ("port-closes", {"port": "@closes", "state": "stopped", "timeout": 10}),
    ("trigger-appears", {"port": "@trigger-appears", "timeout": 5}),
    ("file-appears-with-text", {"path": "@/ready.log", "search_regex": "READY on port (\\d+)", "timeout": 10}),
    # refused by both
    ("port-and-path", {"port": "@open", "path": "@/file"}),
    ("path-stopped", {"path": "@/file", "state": "stopped"}),
    ("path-drained", {"path": "@/file", "state": "drained"}),
    ("exclude-hosts-without-drained", {"port": "@open", "exclude_hosts": ["10.0.0.1"]}),
    ("bad-connection-state", {"port": "@busy", "state": "drained", "active_connection_states": ["LISTEN"]}),
    ("bad-regex", {"path": "@/log", "search_regex": "(unclosed"}),
]
MOVING = {"trigger-opens": "port-opens", "trigger-closes": "port-closes", "trigger-appears": "file-appears-with-text"}
WAITED = set(MOVING.values())  # elapsed: up to a few seconds, on each side

OURS_ONLY = {
    "elapsed_s": "elapsed as a float",
    "match": "the matched text (search_regex in a file)",
    "groups": "match_groups, under its old name",
    "match_end_offset": "the byte after the match: a from_offset for the next wait",
}

# Where we differ on purpose: id, the arguments, flags, what Ansible does, what ours does ({"failed": words}: a
# failure whose msg holds the words; {"field": value}: a result with these fields)
DIFFERENCES = [
    # Ansible's wait_for does not run in check mode (skipped); ours looks once and does not wait
    ("check-mode", {"path": "@/file", "timeout": 5}, "check", {"skipped": True}, {"state": "file", "failed": False}),
    # a regex on a folder: Ansible cannot read it and waits out the timeout; ours says so at once
    ("regex-on-a-folder", {"path": "@/dir", "search_regex": "x", "timeout": 1}, "",
     {"failed": "Timeout when waiting for search string x in"}, {"failed": "is a directory; search_regex needs a file"}),
    # search_regex with state absent: Ansible ignores the regex (the path is absent: done); ours refuses it
    ("regex-with-absent", {"path": "@/gone", "search_regex": "x", "state": "absent", "timeout": 1}, "",
     {"state": "absent", "failed": False}, {"failed": "with state absent it would be ignored"}),
    # drained without a port: Ansible's module fails on int(None); ours says what is missing
    ("drained-without-port", {"state": "drained", "timeout": 1}, "", {"failed": "int() argument must be"},
     {"failed": "state=drained needs port"}),
]


def _fill(value, world: World):
    if isinstance(value, str) and value.startswith("@/"):
        return str(world.root / value[2:])
    if isinstance(value, str) and value.startswith("@trigger-"):
        return world.triggers[value[len("@trigger-"):]]
    if isinstance(value, str) and value.startswith("@"):
        return getattr(world, f"{value[1:]}_port")
    if isinstance(value, dict):
        return {k: _fill(v, world) for k, v in value.items()}
    return value


@pytest.fixture(scope="module")
def both(tmp_path_factory) -> dict:
    """{case id: (Ansible's result, ours)}: one ansible-playbook run for all the cases; ours beside it for the
    cases where nothing moves, after it (the world put back) for the moving ones."""
    work = tmp_path_factory.mktemp("wait-for-vs-ansible")
    root = work / "world"
    root.mkdir()
    world = World(root)
    try:
        every = [(cid, _fill(args, world), "") for cid, args in CASES] + [
            (cid, _fill(args, world), flags) for cid, args, flags, _a, _o in DIFFERENCES]
        moving = set(MOVING) | set(MOVING.values())
        with ThreadPoolExecutor(4) as pool:
            still = {cid: pool.submit(run_ours, "wait_for", work, cid, args, flags)
                     for cid, args, flags in every if cid not in moving}
            theirs, _printed = run_ansible(work, "wait_for", every)
            world.reset()
            by_id = {cid: (args, flags) for cid, args, flags in every}

            def pair(trigger: str) -> list:
                return [run_ours("wait_for", work, cid, *by_id[cid]) for cid in (trigger, MOVING[trigger])]

            moved = dict(zip(MOVING, pool.map(pair, MOVING)))
        ours = {cid: f.result() for cid, f in still.items()}
        for trigger, (first, second) in moved.items():
            ours[trigger], ours[MOVING[trigger]] = first, second
        return {cid: (theirs[cid], ours[cid]) for cid, _a, _f in every}
    finally:
        world.close()


@pytest.mark.parametrize("cid", [c[0] for c in CASES])
def test_wait_for_returns_what_ansibles_returns(both, cid):
    theirs, ours = both[cid]
    assert bool(ours["failed"]) == bool(theirs.get("failed")), (theirs, ours)
    assert ours["changed"] is False and theirs["changed"] is False
    assert set(fields(theirs)) == set(fields(ours)) - set(OURS_ONLY), (theirs, ours)
    for key in set(fields(theirs)) - {"elapsed"}:
        assert ours[key] == theirs[key], f"{key}: ours {ours[key]!r}, Ansible's {theirs[key]!r}"
    if cid in WAITED:  # it waited for the thing, on each side (a second after the trigger, give or take)
        assert 0 <= ours["elapsed"] <= 3 and 0 <= theirs["elapsed"] <= 3 and ours["elapsed_s"] > 0.2, (theirs, ours)
    else:
        assert ours.get("elapsed") == theirs.get("elapsed"), (theirs, ours)
    if theirs.get("failed"):
        if "msg" in CASES_BY_ID[cid]:
            assert ours["msg"] == theirs["msg"]
        else:
            assert ours["msg"].startswith(theirs["msg"]), (theirs, ours)  # Ansible's words, ours may go on
    else:
        assert "msg" not in theirs and ours["msg"]


CASES_BY_ID = dict(CASES)


@pytest.mark.parametrize("cid, ansible_does, we_do", [(c[0], c[3], c[4]) for c in DIFFERENCES],
                         ids=[c[0] for c in DIFFERENCES])
def test_where_we_differ_on_purpose(both, cid, ansible_does, we_do):
    for result, expected, who in ((both[cid][0], ansible_does, "Ansible"), (both[cid][1], we_do, "ours")):
        if "failed" in expected and isinstance(expected["failed"], str):
            assert result.get("failed") and expected["failed"] in result["msg"], (
                f"{who}: {result}: compare again and update DIFFERENCES")
        else:
            assert {k: bool(result.get(k)) if k in ("failed", "skipped") else result.get(k) for k in expected} == expected, (
                who, result)


def test_the_cases_cover_what_the_brief_names(both):
    """A listening socket, one that opens and one that closes while waited for, a file that appears holding the
    awaited text, a timeout kept short: each is a case above, and says what it should."""
    ours = {cid: o for cid, (_t, o) in both.items()}
    assert not ours["port-open"]["failed"] and ours["port-timeout"]["msg"].startswith("Timeout when waiting for 127.0.0.1:")
    assert ours["port-opens"]["elapsed_s"] > 0.2 and ours["port-closes"]["elapsed_s"] > 0.2
    assert ours["file-appears-with-text"]["match_groups"] == ["8000"]
    assert ours["regex-groups"]["match_groupdict"] == {"model": "qwen"}
    assert ours["regex-groups"]["match_groups"] == ["qwen", "8000"]
    assert ours["drained-timeout"]["failed"] and not ours["drained-excluding-the-client"]["failed"]
    assert ours["path-absent-timeout-msg"]["msg"] == "the file stayed"
    assert ours["sleep-only"]["elapsed"] == 1 and ours["file-present-after-a-delay"]["elapsed"] == 1


# ---------------------------------------------------------------- a playbook written for Ansible, run by ours


def test_a_playbook_written_for_ansible_runs_with_ours(tmp_path):
    from engine.api import run_playbook

    log = tmp_path / "server.log"
    log.write_text("INFO Uvicorn running on http://0.0.0.0:8000\n")
    with listen() as s:
        port = s.getsockname()[1]
        tasks = [
            {"name": "port", "ansible.builtin.wait_for": {"port": port, "host": "127.0.0.1", "delay": 0, "timeout": 5,
                                                           "connect_timeout": 2, "sleep": 1}, "register": "p"},
            {"name": "log", "wait_for": {"path": str(log), "search_regex": "running on http://[^:]+:(?P<port>\\d+)",
                                         "timeout": 5}, "register": "l"},
            {"name": "gone", "wait_for": {"path": str(tmp_path / "nope"), "state": "absent", "timeout": 5}},
            {"name": "read them", "assert": {"that": [
                f"p.port == {port}", "p.state == 'started'", "p.elapsed == 0", "l.match_groupdict.port == '8000'",
                "l.match_groups[0] == '8000'", "p is not changed"]}},
        ]
        book = tmp_path / "pb.yaml"
        book.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": tasks}], sort_keys=False))
        inv = tmp_path / "inv.yaml"
        inv.write_text(yaml.safe_dump({"all": {"hosts": {"h": {"ansible_connection": "local"}}}}))
        res = run_playbook(str(book), str(inv))
    assert res.exit_code == 0, (res.error, [(t["task"], t["msg"]) for t in res.tasks if t["status"] == "failed"])
    assert os.path.exists(log)
