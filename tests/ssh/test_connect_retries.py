"""A transient connect failure is retried (engine/connection/client.py: the first attempt without tenacity, the later
ones through it), and dfp_connect_retries: 1 means one attempt. Real sshd; the transient failure is a real
ProxyCommand that fails its first time (as a bastion still booting would) and relays the connection after."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from tests.helpers import play

pytestmark = pytest.mark.ssh

BOOK = "- hosts: all\n  gather_facts: false\n  tasks:\n    - name: Talk\n      command: {argv: [echo, hi]}\n"

# Fails (exit 1) the first time, counting each start in COUNT; relays stdin/stdout to HOST:PORT after.
RELAY = """
import os, socket, sys, threading
count, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
with open(count, "a") as f:
    f.write("x")
if os.path.getsize(count) == 1:
    sys.exit(1)
s = socket.create_connection((host, port))
def up():
    while (b := os.read(0, 65536)):
        s.sendall(b)
    s.shutdown(socket.SHUT_WR)
threading.Thread(target=up, daemon=True).start()
while (b := s.recv(65536)):
    os.write(1, b)
"""


def _inventory(tmp_path: Path, h, retries: int) -> tuple[Path, Path]:
    relay, count = tmp_path / "relay.py", tmp_path / "starts"
    relay.write_text(RELAY)
    proxy = f"-o ProxyCommand='{sys.executable} {relay} {count} %h %p'"
    host = dict(h.inventory_vars(), ansible_ssh_common_args=proxy, dfp_connect_retries=retries)
    inv = tmp_path / "inventory.yaml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": {"booting": host}}}))
    return inv, count


def test_a_failed_first_connect_is_retried_and_the_run_succeeds(tmp_path, ssh_hosts):
    inv, count = _inventory(tmp_path, ssh_hosts[0], retries=3)
    res = play(BOOK, inv, tmp_path)
    assert res.exit_code == 0, [(t["task"], t["msg"]) for t in res.tasks]
    assert count.read_text() == "xx" and res.find("Talk", "booting")[0].result["stdout"] == "hi"


def test_one_attempt_means_no_retry(tmp_path, ssh_hosts):
    inv, count = _inventory(tmp_path, ssh_hosts[0], retries=1)
    res = play(BOOK, inv, tmp_path)
    assert res.exit_code == 3 and res.recap["booting"]["unreachable"] == 1
    assert count.read_text() == "x"
    [row] = res.tasks
    assert "after 1 attempt(s)" in row["msg"] and "ProxyCommand" in row["msg"], row["msg"]
