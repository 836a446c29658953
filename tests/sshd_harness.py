"""Real OpenSSH servers on 127.0.0.x for tests and benchmarks.

Each host is its own `sshd -D` on 127.0.0.N (one free port per pool) with a generated host key; a dedicated non-root user
with an empty home logs in with a generated key. known_hosts is written from the real host keys, so
host key checking stays on, as in production. Facts and pitfalls: shared/reference/test-environment.md.

For fleets (the benchmark's 50 and 100 hosts) a pool can be lighter: `per_daemon=16` lets one sshd listen
on up to 16 addresses (OpenSSH's MAX_LISTEN_SOCKS), so 100 hosts are 7 daemons, and `reexec=False` starts
sshd with `-r` (a connection is served by a fork of the listener instead of a fresh exec of sshd, which
re-reads its config and keys). Each host still has its own address and its own SSH session; its `pid` is
then the listener it shares with up to 15 others (the tests that look below one host's sshd use the
default, one daemon per host).
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
TEST_USER = os.environ.get("DFP_TEST_USER", "dfptest")
PORT = 2222  # the default; each pool picks a free port so parallel test sessions don't collide
MAX_ADDRESSES_PER_DAEMON = 16  # OpenSSH's MAX_LISTEN_SOCKS: sshd refuses more ListenAddress lines


def free_port(addresses: list[str]) -> int:
    """A port free on every given loopback address (sessions running at once get different ones)."""
    import random

    for _ in range(200):
        port = random.randint(20000, 40000)
        ok = True
        for addr in addresses:
            with socket.socket() as s:
                try:
                    s.bind((addr, port))
                except OSError:
                    ok = False
                    break
        if ok:
            return port
    return PORT


def loopback_address(n: int) -> str:
    """The n-th address of 127.0.0.0/8 (127.0.0.n below 256, then 127.0.1.0 and on): a fleet of 1,000 hosts
    needs more than one octet, and every address of 127/8 reaches this machine's loopback."""
    return f"127.{n >> 16 & 255}.{n >> 8 & 255}.{n & 255}"


@dataclass
class SshHost:
    name: str
    address: str
    port: int
    user: str
    key: str
    known_hosts: str
    pid: int = 0

    def inventory_vars(self) -> dict:
        return {
            "ansible_host": self.address,
            "ansible_port": self.port,
            "ansible_user": self.user,
            "ansible_ssh_private_key_file": self.key,
            "ansible_ssh_known_hosts_file": self.known_hosts,
        }


def available() -> str | None:
    """None when real sshd tests can run here, else the reason they cannot."""
    if not os.path.exists(SSHD):
        return "openssh-server is not installed (apt-get install openssh-server)"
    if os.geteuid() != 0:
        return "the sshd harness runs as root (it starts sshd for a dedicated test user)"
    return None


def ensure_user(name: str = TEST_USER) -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        subprocess.run(["useradd", "--create-home", "--shell", "/bin/sh", name], check=True)
        # With UsePAM no, a user without a password hash is "locked"; '*' means no password login.
        subprocess.run(["usermod", "-p", "*", name], check=True)
        return pwd.getpwnam(name)


def _keygen(path: Path, comment: str) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)], check=True)


def _wait_port(address: str, port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((address, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.02)
    raise RuntimeError(f"sshd on {address}:{port} did not start listening")


@dataclass
class SshdPool:
    """N sshd hosts on 127.0.0.2.. plus files to reach them. Stop with .stop()."""

    count: int = 9
    first_octet: int = 2
    per_daemon: int = 1  # addresses one sshd listens on (at most 16); 1 = each host its own daemon
    reexec: bool = True  # False: sshd -r, connections served by a fork of the listener (lighter)
    hosts: list[SshHost] = field(default_factory=list)
    root: Path | None = None
    port: int = 0
    _procs: list[subprocess.Popen] = field(default_factory=list)

    def start(self) -> SshdPool:
        user = ensure_user()
        self.root = Path(tempfile.mkdtemp(prefix="dfp-sshd-"))
        os.chmod(self.root, 0o755)
        host_key = self.root / "host_ed25519_key"
        _keygen(host_key, "dfp-test-host")
        client_key = self.root / "client_key"
        _keygen(client_key, "dfp-test-client")
        auth = self.root / f"authorized_keys_{user.pw_name}"
        shutil.copy(str(client_key) + ".pub", auth)
        os.chmod(auth, 0o644)
        config = self.root / "sshd_config"
        config.write_text(
            f"HostKey {host_key}\nPidFile none\nAuthorizedKeysFile {self.root}/authorized_keys_%u\n"
            "PubkeyAuthentication yes\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
            "UsePAM no\nStrictModes no\nMaxSessions 50\nMaxStartups 100:30:200\n"
            "Subsystem sftp /usr/lib/openssh/sftp-server\n"
        )
        os.makedirs("/run/sshd", exist_ok=True)
        pub = (Path(str(host_key) + ".pub")).read_text().split()
        known = self.root / "known_hosts"
        lines = []
        addresses = [loopback_address(self.first_octet + i) for i in range(self.count)]
        self.port = self.port or free_port(addresses)
        step = max(1, min(self.per_daemon, MAX_ADDRESSES_PER_DAEMON))
        for first in range(0, len(addresses), step):
            group = addresses[first : first + step]
            proc = self._start_daemon(config, group)
            for addr in group:
                lines.append(f"[{addr}]:{self.port} {pub[0]} {pub[1]}")
                name = f"h{len(self.hosts) + 1}"
                self.hosts.append(SshHost(name, addr, self.port, user.pw_name, str(client_key), str(known), proc.pid))
        known.write_text("\n".join(lines) + "\n")
        for h in self.hosts:
            _wait_port(h.address, h.port)
        return self

    def _start_daemon(self, config: Path, addresses: list[str]) -> subprocess.Popen:
        """One `sshd -D` listening on these addresses (the pool's port), logging to a file of the pool."""
        argv = [SSHD, "-D", "-e", "-f", str(config), "-p", str(self.port)]
        if not self.reexec:
            argv.append("-r")
        argv += [a for addr in addresses for a in ("-o", f"ListenAddress={addr}")]
        with open(self.root / f"sshd-{addresses[0]}.log", "wb") as log:
            proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=log)
        self._procs.append(proc)
        return proc

    def stop(self) -> None:
        for proc in self._procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self._procs:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
        if self.root:
            shutil.rmtree(self.root, ignore_errors=True)

    def start_extra(self, address: str, host_key: Path | None = None) -> tuple[subprocess.Popen, Path]:
        """Another sshd (e.g. with a different host key to test a changed key). Caller stops it."""
        key = host_key or self.root / f"host_key_{address}"
        if not key.exists():
            _keygen(key, "dfp-test-other")
        config = self.root / f"sshd_config_{address}"
        text = (self.root / "sshd_config").read_text().replace(str(self.root / "host_ed25519_key"), str(key))
        config.write_text(text)
        proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config), "-p", str(self.port), "-o", f"ListenAddress={address}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _wait_port(address, self.port)
        return proc, key


def write_inventory(path: Path, hosts: list[SshHost] | None = None, vars: dict | None = None,
                    host_vars: dict | None = None, local: bool = False, groups: dict | None = None) -> Path:
    """An Ansible-format inventory for the given sshd hosts (and a `local` host if asked)."""
    entries: dict = {}
    for h in hosts or []:
        entries[h.name] = dict(h.inventory_vars(), **((host_vars or {}).get(h.name, {})))
    if local:
        entries["local"] = dict({"ansible_connection": "local"}, **((host_vars or {}).get("local", {})))
    data: dict = {"all": {"hosts": entries, "vars": vars or {}}}
    if groups:
        data["all"]["children"] = {g: {"hosts": {n: None for n in names}} for g, names in groups.items()}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def run_as_user(argv: list[str], user: str = TEST_USER, **kw) -> subprocess.Popen:
    """Start a process as the test user (for processes the ssh-side modules must find as 'ours')."""
    pw = pwd.getpwnam(user)

    def demote() -> None:
        os.setgid(pw.pw_gid)
        os.setuid(pw.pw_uid)

    env = {"HOME": pw.pw_dir, "PATH": "/usr/local/bin:/usr/bin:/bin", "USER": user}
    return subprocess.Popen(argv, preexec_fn=demote, env=env, **kw)
