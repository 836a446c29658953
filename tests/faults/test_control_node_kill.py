"""The control node SIGKILLed mid-provision: while the server starts (over `local` and over a real
sshd) and while the serving environment is being built. The host keeps whatever the orphaned worker
was doing; what must hold: between the kill and the next run the pidfile names only the server that was
started and `current` only ever points at a complete environment; the next run converges (one server,
nothing orphaned; the new environment built and switched to); the run after it changes nothing.

The control node is a real process (`python3 -m invoke play ...`), killed with SIGKILL alone (its
workers are not signalled, as when the machine running it dies or the OOM killer picks it).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml

from tests.fakes.served import ROOT, SERVICE, START, alive_servers, msgs, paths_of, result_of, server_vars
from tests.fakes.slow_index import SlowIndex
from tests.fakes.vllm_processes import kill_leftovers, started_pids
from tests.fakes.wheels import simple_wheel
from tests.helpers import play

ENV_MARKER = ".dfp-env.json"
BUILD = "Build the serving environment beside the current one, verify it by import and switch to it"
VENV = """\
- name: serving environment
  hosts: all
  gather_facts: false
  pre_tasks:
    - import_role: {name: common, tasks_from: variables}
  roles:
    - venv
"""


def clean_env() -> dict:
    """The control node's environment without the pip configuration of this machine."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_")) and k != "VIRTUAL_ENV"}
    env["PIP_CONFIG_FILE"] = os.devnull
    return env


def control_node(book: str, inventory: Path, tmp_path: Path, extra: dict | None = None) -> subprocess.Popen:
    """`python3 -m invoke play BOOK -i INVENTORY [-e @extra.yaml]`, as a person would start it."""
    path = tmp_path / "control-node-play.yaml"
    path.write_text(book)
    argv = [sys.executable, "-m", "invoke", "play", str(path), "--inventory", str(inventory)]
    if extra:
        (tmp_path / "extra.yaml").write_text(yaml.safe_dump(extra))
        argv += ["-e", f"@{tmp_path / 'extra.yaml'}"]
    log = open(tmp_path / "control-node.out", "wb")
    return subprocess.Popen(argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=clean_env(), start_new_session=True)


def wait_for(what: str, ok, timeout: float = 60, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the control node ended (rc {proc.returncode}) before {what}")
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def kill_control_node(proc: subprocess.Popen, recursive: bool) -> list:
    """SIGKILL the control node process alone; return the PIDs of its children (its workers), with
    their descendants if `recursive` (an installer; a server is not an orphan: it is meant to run)."""
    orphans = [c.pid for c in psutil.Process(proc.pid).children(recursive=recursive)]
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    return orphans


def wait_gone(pids: list, timeout: float = 60) -> None:
    def gone() -> bool:
        for pid in pids:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    return False
            except psutil.NoSuchProcess:
                pass
        return True

    wait_for(f"the orphaned processes {pids} to end", gone, timeout)


# ---------------------------------------------------------------- the server starting


def killed_while_starting(inv: Path, hv: dict, tmp_path: Path, host: str) -> None:
    p = paths_of(hv)
    cn = control_node(SERVICE, inv, tmp_path)
    try:
        wait_for("the server to be spawned", lambda: started_pids(p["logs"]) and p["pidfile"].exists(), proc=cn)
        orphans = kill_control_node(cn, recursive=False)
    finally:
        if cn.poll() is None:
            cn.kill()
    # Between the kill and the next run: the pidfile names the one server that was started.
    [spawned] = started_pids(p["logs"])
    assert json.loads(p["pidfile"].read_text())["pid"] == spawned

    res = play(SERVICE, inv, tmp_path)
    assert res.exit_code == 0, msgs(res)
    pid = result_of(res, START, host)["pid"]
    assert pid == spawned, "a server still starting was restarted instead of waited for"
    assert list(alive_servers(p["logs"])) == [pid], "more than one server, or leftovers of one, are alive"
    again = play(SERVICE, inv, tmp_path)
    assert again.exit_code == 0 and again.recap[host]["changed"] == 0, msgs(again)
    assert result_of(again, START, host)["pid"] == pid
    if host == "local":
        wait_gone(orphans)  # the orphaned worker did not linger


@pytest.fixture
def leftovers(tmp_path):
    dirs: list = []
    yield dirs.append
    for inv, d in dirs:
        play(ROOT / "playbooks" / "teardown.yaml", inv, tmp_path)
        assert not kill_leftovers([d]), "stand-in server processes survived teardown"


def test_control_node_killed_while_the_server_starts_then_the_next_run_converges(tmp_path, inventory_file, leftovers):
    hv = server_vars(tmp_path, "slow", fake={"ready_s": "5"})
    inv = inventory_file(local=True, host_vars={"local": hv})
    leftovers((inv, paths_of(hv)["logs"]))
    killed_while_starting(inv, hv, tmp_path, "local")


@pytest.mark.slow
def test_control_node_killed_while_the_server_starts_over_ssh_then_the_next_run_converges(
    ssh_host, shared_tmp, tmp_path, inventory_file, leftovers
):
    hv = server_vars(shared_tmp, "slow", user=ssh_host.user, fake={"ready_s": "5"})
    inv = inventory_file(hosts=[ssh_host], host_vars={ssh_host.name: hv})
    leftovers((inv, paths_of(hv)["logs"]))
    killed_while_starting(inv, hv, tmp_path, ssh_host.name)


# ---------------------------------------------------------------- the environment being built


def current_is_complete(root: Path) -> str:
    """Where `current` points; it must be a complete environment (its marker is written last)."""
    target = os.readlink(root / "current")
    assert (root / target / ENV_MARKER).is_file(), f"current points at {target}, which has no {ENV_MARKER}"
    return target


def env_version(root: Path) -> str:
    out = subprocess.run(
        [str(root / "current" / "bin" / "python"), "-c", "import dfp_a; print(dfp_a.__version__)"],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


@pytest.mark.slow
def test_control_node_killed_while_the_environment_builds_keeps_current_and_the_next_run_converges(
    tmp_path, inventory_file, monkeypatch
):
    for k, v in clean_env().items():
        monkeypatch.setenv(k, v)
    for k in [k for k in os.environ if k.startswith(("PIP_", "UV_")) and k != "PIP_CONFIG_FILE"]:
        monkeypatch.delenv(k)
    wheels = tmp_path / "wheels"
    simple_wheel(wheels, "dfp-a", "1.0")
    simple_wheel(wheels, "dfp-a", "2.0")
    root = tmp_path / "venv"
    hv = {"venv_root": str(root), "vllm_flavor": "none", "venv_installer": "pip", "extra_requirements": ["dfp-a==1.0"]}
    inv = inventory_file(local=True, host_vars={"local": hv})
    first = play(VENV, inv, tmp_path, extra_vars={"wheelhouse": str(wheels)})
    assert first.exit_code == 0, msgs(first)
    old = current_is_complete(root)

    index = SlowIndex(wheels).start()
    new_env = {"extra_requirements": ["dfp-a==2.0"], "index_url": index.url}
    try:
        cn = control_node(VENV, inv, tmp_path, extra=new_env)
        try:
            wait_for("the installer to download from the index", index.asked.is_set, proc=cn)
            orphans = kill_control_node(cn, recursive=True)
        finally:
            if cn.poll() is None:
                cn.kill()
        # Between the kill and the next run: the half-built environment has no marker, current is the old one.
        half = [n for n in os.listdir(root / "envs") if f"envs/{n}" != old]
        assert len(half) == 1 and not (root / "envs" / half[0] / ENV_MARKER).exists()
        assert current_is_complete(root) == old and env_version(root) == "1.0"
        index.release.set()  # the orphaned installer goes on; current must never point at a broken env
        deadline = time.monotonic() + 60
        while any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in orphans):
            assert time.monotonic() < deadline, "the orphaned worker never ended"
            assert current_is_complete(root) in (old, f"envs/{half[0]}")
            time.sleep(0.01)

        again = play(VENV, inv, tmp_path, extra_vars=new_env)
        assert again.exit_code == 0, msgs(again)
        assert current_is_complete(root) == f"envs/{half[0]}" and env_version(root) == "2.0"
        settled = play(VENV, inv, tmp_path, extra_vars=new_env)
        assert settled.exit_code == 0 and settled.recap["local"]["changed"] == 0, msgs(settled)
    finally:
        index.stop()
