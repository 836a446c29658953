"""What building the connection layer on Fabric's `Connection` would cost, against the engine's own paramiko path.

Against real sshd hosts on loopback (tests/sshd_harness.py, host keys checked from the pool's known_hosts), each
repetition opens a connection, runs one command (`true`) and closes it, in these ways, interleaved (the order
rotates every repetition so that a slow spell of the machine falls on all of them):

  fabric          fabric.Connection configured safely (the pool's known_hosts loaded, paramiko's RejectPolicy
                  instead of Fabric's default AutoAddPolicy), the command through Connection.run (invoke's Runner)
  fabric+sock     the same, given the engine's socket in connect_kwargs (TCP_NODELAY and quick ACKs from the
                  first packet: engine/connection/ssh_connect.py tcp_socket), as a layer built on Fabric would
  fabric+sock+cfg  the same, every Connection given one fabric.Config made once (else each makes its own,
                  reading the ssh config files again)
  fabric+sock-exec  as fabric+sock, the command through its paramiko transport (Fabric without invoke's Runner)
  engine          engine.connection.ssh_connect.open_connection on an inventory Host (route, ssh config, known_hosts
                  and policy resolved as a run does), the command on a session of that transport, as the engine
                  starts its worker (engine/connection/transport.py)
  fabric-jump     as fabric, reached through a jump host: gateway=Connection(jump host, configured the same way)
  fabric+sock-jump  as fabric-jump, the jump host's Connection given the engine's socket
  engine-jump     as engine, with `-o ProxyJump=user@jump:port` in ansible_ssh_common_args

For each: wall time and the control node's CPU (this process, all threads: paramiko's transport thread too),
medians (and min) over the repetitions. sshd's own work (a fork and exec of sshd per connection) is on the same
cores, so the wall mostly measures sshd; the CPU column is the client's cost, which is what a fleet multiplies.

Then the import cost, each in a fresh `python -c` (the median of --import-reps, interleaved): nothing, paramiko,
invoke + paramiko (what the CLI already loads: invoke is the CLI, paramiko the SSH client), fabric; and
`import fabric` timed inside a process that already holds invoke and paramiko (what fabric itself adds).
Finally, whether Fabric's default Connection (no settings) logs in to a host whose key it has never seen.

Usage: python bench/fabric_connection.py [--reps 15] [--import-reps 9] [--first-octet 120]   (as root: sshd hosts)
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

COMMAND = "true"


def _exec(transport) -> None:
    """One command on a fresh session of a paramiko transport, waited for (exit status 0)."""
    chan = transport.open_session()
    try:
        chan.exec_command(COMMAND)
        status = chan.recv_exit_status()
    finally:
        chan.close()
    if status != 0:
        raise RuntimeError(f"{COMMAND!r} exited {status}")


# -- the ways of connecting ---------------------------------------------------------------------------------------


_SHARED_CONFIG: list = []


def shared_config():
    from fabric import Config

    if not _SHARED_CONFIG:
        _SHARED_CONFIG.append(Config())
    return _SHARED_CONFIG[0]


def fabric_connection(h, gateway=None, sock: bool = False, config=None):
    """A Fabric Connection as the tool would need it: the host's known_hosts loaded, unknown keys refused.
    sock: connect over the engine's TCP socket (NODELAY, quick ACKs) instead of the one paramiko opens."""
    import paramiko
    from fabric import Connection

    from engine.api import tcp_socket

    kwargs = {"key_filename": [h.key], "look_for_keys": False, "allow_agent": False}
    if sock:
        kwargs["sock"] = tcp_socket(h.address, h.port, 10)
    conn = Connection(h.address, user=h.user, port=h.port, gateway=gateway, connect_timeout=10, connect_kwargs=kwargs,
                      config=config)
    conn.client.load_host_keys(h.known_hosts)
    conn.client.set_missing_host_key_policy(paramiko.RejectPolicy())
    return conn


def fabric_run(h, jump=None, sock: bool = False, config=None) -> None:
    gateway = fabric_connection(jump, sock=sock, config=config) if jump is not None else None
    conn = fabric_connection(h, gateway, sock=sock and gateway is None, config=config)
    try:
        conn.run(COMMAND, hide=True, in_stream=False)
    finally:
        conn.close()
        if conn.gateway:
            conn.gateway.close()


def fabric_exec(h, sock: bool = False) -> None:
    conn = fabric_connection(h, sock=sock)
    try:
        conn.open()
        _exec(conn.transport)
    finally:
        conn.close()


def engine_host(h, jump=None):
    from engine.api import Host

    args = "-o ControlPersist=no" + (f" -o ProxyJump={jump.user}@{jump.address}:{jump.port}" if jump else "")
    return Host(h.name, dict(h.inventory_vars(), ansible_ssh_common_args=args))


def engine_run(host) -> None:
    from engine.api import open_connection

    conn = open_connection(host)
    try:
        _exec(conn.client.get_transport())
    finally:
        conn.close()


# -- measuring ----------------------------------------------------------------------------------------------------


def timed(fn) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def connections(pool, reps: int) -> dict[str, list[tuple[float, float]]]:
    target, jump = pool.hosts[1], pool.hosts[0]
    cases = {
        "fabric": lambda: fabric_run(target),
        "fabric+sock": lambda: fabric_run(target, sock=True),
        "fabric+sock+cfg": lambda: fabric_run(target, sock=True, config=shared_config()),
        "fabric+sock-exec": lambda: fabric_exec(target, sock=True),
        "engine": lambda: engine_run(engine_host(target)),
        "fabric-jump": lambda: fabric_run(target, jump),
        "fabric+sock-jump": lambda: fabric_run(target, jump, sock=True),
        "engine-jump": lambda: engine_run(engine_host(target, jump)),
    }
    for fn in cases.values():  # warm-up: imports, first-use caches (the engine's parsed known_hosts), sshd's page cache
        fn()
    names = list(cases)
    samples: dict[str, list[tuple[float, float]]] = {n: [] for n in names}
    for rep in range(reps):
        order = names[rep % len(names):] + names[:rep % len(names)]
        for name in order:
            samples[name].append(timed(cases[name]))
    return samples


IMPORTS = {
    "nothing": "pass",
    "paramiko": "import paramiko",
    "invoke + paramiko": "import invoke, paramiko",
    "fabric": "import fabric",
}
ADDED = ("import invoke, paramiko, time; t = time.perf_counter(); import fabric; "
         "print(time.perf_counter() - t)")
NEW_MODULES = ("import sys, invoke, paramiko; before = set(sys.modules); import fabric; "
               "print(' '.join(sorted({m.split('.')[0] for m in set(sys.modules) - before})))")


def imports(reps: int) -> tuple[dict[str, list[float]], list[float], str]:
    env = dict(os.environ)
    env.pop("PYTHONPROFILEIMPORTTIME", None)
    walls: dict[str, list[float]] = {n: [] for n in IMPORTS}
    added: list[float] = []
    for _ in range(reps):
        for name, code in IMPORTS.items():
            started = time.perf_counter()
            subprocess.run([sys.executable, "-c", code], check=True, env=env)
            walls[name].append(time.perf_counter() - started)
        out = subprocess.run([sys.executable, "-c", ADDED], check=True, env=env, capture_output=True, text=True)
        added.append(float(out.stdout))
    new = subprocess.run([sys.executable, "-c", NEW_MODULES], check=True, env=env, capture_output=True, text=True)
    return walls, added, new.stdout.strip()


def fabric_default_accepts_unknown_key(h) -> bool:
    """Does fabric.Connection with nothing set log in to a host whose key is in no known_hosts it reads?"""
    from fabric import Connection

    conn = Connection(h.address, user=h.user, port=h.port, connect_timeout=10,
                      connect_kwargs={"key_filename": [h.key], "look_for_keys": False, "allow_agent": False})
    try:
        conn.open()
        return conn.is_connected
    except Exception:  # noqa: BLE001 - any refusal means: not accepted
        return False
    finally:
        conn.close()


def ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:6.1f} (min {min(values) * 1000:5.1f})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=15, help="connections per way (default 15)")
    ap.add_argument("--import-reps", type=int, default=9, help="fresh interpreters per import (default 9)")
    ap.add_argument("--first-octet", type=int, default=120, help="sshd hosts on 127.0.0.N.. (default 120)")
    args = ap.parse_args(argv)

    import fabric
    import invoke
    import paramiko

    from tests import sshd_harness

    print(f"python {sys.version.split()[0]}, fabric {fabric.__version__}, invoke {invoke.__version__}, "
          f"paramiko {paramiko.__version__}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}")
    walls, added, new = imports(args.import_reps)
    print(f"\nimport, fresh interpreter, wall ms: median (min) of {args.import_reps}")
    for name, values in walls.items():
        print(f"  {name:<20} {ms(values)}")
    base = statistics.median(walls["invoke + paramiko"])
    print(f"  fabric - (invoke + paramiko): {(statistics.median(walls['fabric']) - base) * 1000:.1f} ms")
    print(f"  `import fabric` with invoke and paramiko already loaded: {ms(added)} ms; new top-level modules: {new}")

    reason = sshd_harness.available()
    if reason:
        print(f"\nconnections not measured: {reason}")
        return 1
    pool = sshd_harness.SshdPool(count=2, first_octet=args.first_octet).start()
    try:
        samples = connections(pool, args.reps)
        print(f"\nconnect + `{COMMAND}` + close, ms: median (min) of {args.reps}, interleaved; "
              f"sshd on 127.0.0.{args.first_octet}-{args.first_octet + 1}")
        print(f"  {'way':<17} {'wall':>18} {'control-node CPU':>22}")
        for name, values in samples.items():
            print(f"  {name:<17} {ms([v[0] for v in values]):>18} {ms([v[1] for v in values]):>22}")
        accepted = fabric_default_accepts_unknown_key(pool.hosts[1])
        print(f"\nFabric's default Connection (AutoAddPolicy, no known_hosts read) logged in to a host whose key it "
              f"had never seen: {'yes' if accepted else 'no'}")
    finally:
        pool.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
