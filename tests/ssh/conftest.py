"""A bastion and a target that only the bastion can reach, as real sshd processes in a network namespace.

Topology (one per test session):
  control node (root netns) --veth 10.213.x.y/30--> [netns dfpjPID]  bastion sshd on the veth address
                                                                     target sshd on 127.77.0.1 (the netns' own lo)
The target listens on the namespace's loopback, which no process outside that namespace can reach: the control
node connecting to 127.77.0.1 reaches its own loopback, where nothing listens on that port (the test proves it),
while the bastion's sshd, inside the namespace, opens direct-tcpip channels to it. Each sshd has its own host
key; known_hosts holds both, so host keys stay checked on both hops.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests import sshd_harness

TARGET_ADDRESS = "127.77.0.1"


def _keygen(path: Path, comment: str) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)], check=True)


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


def _port_free_here(port: int) -> bool:
    for addr in (TARGET_ADDRESS, "0.0.0.0"):
        with socket.socket() as s:
            try:
                s.bind((addr, port))
            except OSError:
                return False
    return True


@dataclass
class JumpLab:
    root: Path
    netns: str
    bastion: str  # the bastion's address, reachable from the control node
    target: str  # the target's address, reachable only from inside the namespace
    port: int  # both sshd listen on it
    user: str
    key: str
    known_hosts: str  # both host keys
    bastion_pub: str  # "type base64" of each host key
    target_pub: str
    procs: dict

    def target_vars(self, **extra) -> dict:
        """Inventory variables of the target, reached through nothing yet (the test adds the route)."""
        return dict({"ansible_host": self.target, "ansible_port": self.port, "ansible_user": self.user,
                     "ansible_ssh_private_key_file": self.key, "ansible_ssh_known_hosts_file": self.known_hosts},
                    **extra)

    @property
    def jump(self) -> str:
        return f"{self.user}@{self.bastion}:{self.port}"

    def accepted_logins(self, which: str) -> int:
        """How many logins the bastion or target sshd accepted so far (from its log)."""
        return (self.root / f"{which}.log").read_text(errors="replace").count("Accepted publickey")


def _start_sshd(lab_root: Path, netns: str, name: str, address: str, port: int, host_key: Path) -> subprocess.Popen:
    config = lab_root / f"sshd_config_{name}"
    config.write_text(
        f"HostKey {host_key}\nPidFile none\nAuthorizedKeysFile {lab_root}/authorized_keys_%u\n"
        "PubkeyAuthentication yes\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
        "UsePAM no\nStrictModes no\nMaxSessions 50\nAllowTcpForwarding yes\nLogLevel INFO\n"
        "Subsystem sftp /usr/lib/openssh/sftp-server\n")
    log = open(lab_root / f"{name}.log", "wb")  # noqa: SIM115 - sshd writes it for its whole life
    proc = subprocess.Popen(["ip", "netns", "exec", netns, sshd_harness.SSHD, "-D", "-e", "-f", str(config),
                             "-p", str(port), "-o", f"ListenAddress={address}"],
                            stdout=subprocess.DEVNULL, stderr=log)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if f"Server listening on {address} port {port}" in (lab_root / f"{name}.log").read_text(errors="replace"):
            return proc
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    raise RuntimeError(f"{name} sshd did not start: {(lab_root / f'{name}.log').read_text(errors='replace')}")


def _network(netns: str) -> str:
    """The namespace and a veth pair into it; returns the bastion's address (the namespace's end)."""
    pid = os.getpid()
    third, fourth = (pid // 64) % 256, (pid % 64) * 4
    here, there = f"10.213.{third}.{fourth + 1}", f"10.213.{third}.{fourth + 2}"
    dev_here, dev_there = f"{netns}a", f"{netns}b"
    _ip("netns", "add", netns)
    _ip("link", "add", dev_here, "type", "veth", "peer", "name", dev_there)
    _ip("link", "set", dev_there, "netns", netns)
    _ip("addr", "add", f"{here}/30", "dev", dev_here)
    _ip("link", "set", dev_here, "up")
    _ip("-n", netns, "addr", "add", f"{there}/30", "dev", dev_there)
    _ip("-n", netns, "link", "set", dev_there, "up")
    _ip("-n", netns, "link", "set", "lo", "up")
    return there


@pytest.fixture(scope="session")
def jump_lab():
    reason = sshd_harness.available() or (None if shutil.which("ip") else "iproute2 (ip) is not installed")
    if reason:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the jump host tests: {reason}")
        pytest.skip(reason)
    user = sshd_harness.ensure_user()
    root = Path(tempfile.mkdtemp(prefix="dfp-jump-"))
    os.chmod(root, 0o755)
    netns = f"dfpj{os.getpid() % 1000000}"
    procs: dict = {}
    try:
        bastion = _network(netns)
    except subprocess.CalledProcessError as exc:
        shutil.rmtree(root, ignore_errors=True)
        subprocess.run(["ip", "netns", "del", netns], capture_output=True)
        pytest.skip(f"cannot make a network namespace here: {exc.stderr.decode(errors='replace').strip()}")
    try:
        for name in ("bastion_key", "target_key", "client_key"):
            _keygen(root / name, f"dfp-jump-{name}")
        shutil.copy(root / "client_key.pub", root / f"authorized_keys_{user.pw_name}")
        port = next(p for p in (random.randint(20000, 40000) for _ in range(200)) if _port_free_here(p))
        procs["bastion"] = _start_sshd(root, netns, "bastion", bastion, port, root / "bastion_key")
        procs["target"] = _start_sshd(root, netns, "target", TARGET_ADDRESS, port, root / "target_key")
        bastion_pub = " ".join((root / "bastion_key.pub").read_text().split()[:2])
        target_pub = " ".join((root / "target_key.pub").read_text().split()[:2])
        known = root / "known_hosts"
        known.write_text(f"[{bastion}]:{port} {bastion_pub}\n[{TARGET_ADDRESS}]:{port} {target_pub}\n")
        yield JumpLab(root, netns, bastion, TARGET_ADDRESS, port, user.pw_name, str(root / "client_key"),
                      str(known), bastion_pub, target_pub, procs)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    proc.kill()
        subprocess.run(["ip", "netns", "del", netns], capture_output=True)  # takes the veth pair with it
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def host_from():
    """host_from(name, vars) -> an engine Host, as the inventory would give it."""
    from engine.inventory.manager import Host

    return lambda name, vars: Host(name, dict(vars), ["all"])
