"""The peers the benchmark compares against: Ansible, pyinfra and raw Fabric, run on the same sshd hosts.

Ansible and pyinfra live in their own virtual environments under the user's cache dir, created with pip
on first use (never in the project's environment: they would pull their own paramiko/jinja2 versions).
Each peer is timed as a whole CLI process, like our own CLI, with host keys checked against the pool's
known_hosts in all of them.
"""

from __future__ import annotations

import fcntl
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

from bench.timing import run_timed

ROOT = Path(__file__).resolve().parent.parent
WORKLOAD = ROOT / "bench" / "workload"
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "dflash-provision" / "bench"
VENVS = CACHE / "venvs"
# Pinned to the versions of the reference measurements (shared/reference/test-environment.md).
PEER_SPECS = {
    "ansible": ["ansible-core==2.19.14"],
    "pyinfra": ["pyinfra==3.10.0"],
    # Ansible's own speed-up: the same ansible-core with Mitogen's strategy plugins (mitogen_linear).
    "mitogen": ["ansible-core==2.19.14", "mitogen==0.3.54"],
    # A Rust re-implementation of ansible-core (its own `ansible-playbook`).
    "ansible_rs": ["ansible-core-rs==0.16.0"],
}
PEER_BIN = {"ansible": "ansible-playbook", "pyinfra": "pyinfra", "mitogen": "ansible-playbook", "ansible_rs": "ansible"}
INSTALL_TIMEOUT_S = 600


class PeerUnavailable(Exception):
    """A peer could not be installed or run; the message says why (it goes into results.json notes)."""


def ensure_venv(name: str, log=print) -> Path:
    """The peer's executable, installing its environment with pip the first time (locked, re-checked)."""
    specs = PEER_SPECS[name]
    venv = VENVS / name
    exe = venv / "bin" / PEER_BIN[name]
    marker = venv / ".dfp-bench-installed"
    wanted = json.dumps(specs)
    VENVS.mkdir(parents=True, exist_ok=True)
    with open(VENVS / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if exe.exists() and marker.exists() and marker.read_text() == wanted:
            return exe
        log(f"installing {' '.join(specs)} into {venv} (first benchmark run only)")
        steps = [
            [sys.executable, "-m", "venv", "--clear", str(venv)],
            [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", *specs],
        ]
        for argv in steps:
            try:
                proc = subprocess.run(argv, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                raise PeerUnavailable(f"{shlex.join(argv)} took more than {INSTALL_TIMEOUT_S} s") from None
            if proc.returncode != 0:
                tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
                raise PeerUnavailable(f"{shlex.join(argv)} failed (rc {proc.returncode}): {tail}")
        if not exe.exists():
            raise PeerUnavailable(f"{exe} is missing after installing {' '.join(specs)}")
        marker.write_text(wanted)
        return exe


def peer_version(exe: Path) -> str:
    proc = subprocess.run([str(exe), "--version"], capture_output=True, text=True, timeout=60)
    return (proc.stdout or proc.stderr).strip().splitlines()[0] if proc.returncode == 0 else "unknown"


# -- workload variables shared by every tool ---------------------------------------------------------


def workload_base(home: str, tool: str) -> str:
    """Each tool keeps its own folder on the host, so no tool ever sees another's files as a change."""
    return f"{home}/dfp-bench/{tool}"


# -- Ansible ---------------------------------------------------------------------------------------


def ours_argv(inventory: Path, home: str, tool: str, n: int, forks: int | None = None) -> list:
    """Our CLI on the workload, as a whole process (forks: at least the number of hosts unless given)."""
    return [sys.executable, "-m", "invoke", "play", str(WORKLOAD / "ours.yaml"), "-i", str(inventory),
            "-e", f"base={workload_base(home, tool)}", "--forks", str(forks or max(8, n))]


def ansible_inventory(path: Path, hosts: list, python: str = "/usr/bin/python3") -> Path:
    """An Ansible YAML inventory for the pool's hosts; host keys checked against the pool's known_hosts."""
    entries = {}
    for h in hosts:
        entries[h.name] = {
            "ansible_host": h.address,
            "ansible_port": h.port,
            "ansible_user": h.user,
            "ansible_ssh_private_key_file": h.key,
            "ansible_python_interpreter": python,
            "ansible_ssh_common_args": f"-o UserKnownHostsFile={h.known_hosts} -o StrictHostKeyChecking=yes",
        }
    import yaml

    path.write_text(yaml.safe_dump({"all": {"hosts": entries}}, sort_keys=False))
    return path


def ansible_env(control_dir: Path, flavor: str = "ansible") -> dict:
    """Ansible's settings for the benchmark; flavor "mitogen" adds Mitogen's strategy (mitogen_linear)."""
    env = dict(os.environ)
    env.update(
        ANSIBLE_HOST_KEY_CHECKING="True",
        ANSIBLE_SSH_CONTROL_PATH_DIR=str(control_dir),  # ours, so the masters can be closed at the end
        ANSIBLE_RETRY_FILES_ENABLED="False",
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_LOCALHOST_WARNING="False",
        ANSIBLE_INVENTORY_UNPARSED_WARNING="False",
        ANSIBLE_PYTHON_INTERPRETER="/usr/bin/python3",
    )
    if flavor == "mitogen":
        env.update(ANSIBLE_STRATEGY_PLUGINS=str(mitogen_strategy_dir()), ANSIBLE_STRATEGY="mitogen_linear")
    return env


def mitogen_strategy_dir() -> Path:
    """The strategy plugins folder of the Mitogen installed in its benchmark environment."""
    found = sorted((VENVS / "mitogen" / "lib").glob("python3*/site-packages/ansible_mitogen/plugins/strategy"))
    if not found:
        raise PeerUnavailable(f"no ansible_mitogen/plugins/strategy under {VENVS / 'mitogen'}")
    return found[0]


# The Ansible-compatible tools: ansible-playbook itself, with Mitogen, and ansible-core-rs (`ansible playbook`).
ANSIBLE_FLAVORS = ("ansible", "mitogen", "ansible_rs")


def ansible_run(exe: Path, inventory: Path, home: str, control_dir: Path, limit: str | None = None,
                flavor: str = "ansible", forks: int | None = None, timeout: float = 300) -> tuple:
    """One timed run of an Ansible-compatible tool on the workload (its own folder per flavor)."""
    argv = [str(exe), *(["playbook"] if flavor == "ansible_rs" else [])]
    argv += ["-i", str(inventory), str(WORKLOAD / "ansible.yaml"), "-e", f"base={workload_base(home, flavor)}"]
    if limit:
        argv += ["--limit", limit]
    if forks:
        argv += ["--forks", str(forks)]
    return run_timed(argv, env=ansible_env(control_dir, flavor), cwd=str(WORKLOAD), timeout=timeout)


def close_ansible_masters(control_dir: Path) -> None:
    """Ansible leaves ssh ControlPersist masters behind (60 s); ask each to exit through its socket."""
    if not control_dir.is_dir():
        return
    for sock in control_dir.iterdir():
        subprocess.run(["ssh", "-o", f"ControlPath={sock}", "-O", "exit", "bench-host"], capture_output=True, timeout=10)


# -- pyinfra ---------------------------------------------------------------------------------------


def pyinfra_inventory(path: Path, hosts: list) -> Path:
    """A pyinfra inventory (Python) with strict host key checking against the pool's known_hosts."""
    rows = []
    for h in hosts:
        data = {
            "ssh_port": h.port,
            "ssh_user": h.user,
            "ssh_key": h.key,
            "ssh_known_hosts_file": h.known_hosts,
            "ssh_strict_host_key_checking": "yes",
        }
        rows.append((h.address, data))
    path.write_text("hosts = " + repr(rows) + "\n")
    return path


def pyinfra_run(exe: Path, inventory: Path, home: str, limit: str | None = None, timeout: float = 300) -> tuple:
    argv = [str(exe), "-y", "--data", f"base={workload_base(home, 'pyinfra')}"]
    if limit:
        argv += ["--limit", limit]
    argv += [str(inventory), str(WORKLOAD / "pyinfra_deploy.py")]
    env = dict(os.environ, PYINFRA_PROGRESS="off", TERM="dumb")
    return run_timed(argv, env=env, cwd=str(WORKLOAD), timeout=timeout)


# -- raw Fabric (the floor) ------------------------------------------------------------------------


def fabric_hosts_file(path: Path, hosts: list) -> Path:
    path.write_text(
        json.dumps(
            [{"address": h.address, "port": h.port, "user": h.user, "key": h.key, "known_hosts": h.known_hosts} for h in hosts]
        )
    )
    return path


def fabric_run(hosts_file: Path, home: str, tool: str = "fabric") -> tuple:
    """The floor's run; with another tool's name it sets up that tool's folder in the same end state."""
    argv = [sys.executable, str(WORKLOAD / "fabric_floor.py"), str(hosts_file), workload_base(home, tool)]
    return run_timed(argv, cwd=str(ROOT))
