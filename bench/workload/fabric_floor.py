"""The floor: the workload's 11 checks as raw Fabric commands on open connections (TCP_NODELAY).

One command per check (10 commands; the assertion is a Python check of the stat's output), each of
which also makes the state right when it is not, so a first run sets the host up like the other tools.
Host keys are checked: the pool's known_hosts is loaded and unknown hosts are rejected.

Usage: python bench/workload/fabric_floor.py HOSTS.json BASE   (HOSTS.json: [{address, port, user, key, known_hosts}])
"""

from __future__ import annotations

import json
import shlex
import socket
import sys
from concurrent.futures import ThreadPoolExecutor

import paramiko
from fabric import Connection


def commands(base: str) -> list[str]:
    b = shlex.quote(base)
    out = [f"test -d {b}/{d} || mkdir -p {b}/{d}" for d in ("a", "b", "c")]
    for d, n in (("a", "one"), ("b", "two"), ("c", "three")):
        f = f"{b}/{d}/{n}.txt"
        out.append(f'test "$(cat {f} 2>/dev/null)" = {n} || echo {n} > {f}')
    out.append(f"test -e {b}/marker || touch {b}/marker")
    out.append(f"stat -c %s {b}/a/one.txt")
    out.append(f"grep -qxF bench=1 {b}/settings.conf 2>/dev/null || echo bench=1 >> {b}/settings.conf")
    out.append("uname -r")
    return out


def one_host(h: dict, base: str) -> int:
    conn = Connection(
        h["address"], user=h["user"], port=h["port"], connect_kwargs={"key_filename": [h["key"]], "look_for_keys": False}
    )
    conn.client.load_system_host_keys(h["known_hosts"])
    conn.client.set_missing_host_key_policy(paramiko.RejectPolicy())
    conn.open()
    conn.client.get_transport().sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        for cmd in commands(base):
            res = conn.run(cmd, hide=True, in_stream=False)
            if cmd.startswith("stat "):
                assert res.stdout.strip() == "4", f"{h['address']}: one.txt size {res.stdout!r}"  # noqa: S101 - the workload's own check, as the peers' assert task
        return 11
    finally:
        conn.close()


def main() -> int:
    hosts = json.loads(open(sys.argv[1]).read())
    base = sys.argv[2]
    with ThreadPoolExecutor(max_workers=len(hosts)) as pool:
        done = list(pool.map(lambda h: one_host(h, base), hosts))
    print(f"{len(done)} hosts, {sum(done)} checks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
