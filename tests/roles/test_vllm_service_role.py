"""The vllm-service role and the restart-server / teardown playbooks through the engine, over `local` and a
real sshd, with the stand-in server (tests/fakes/fake_vllm.py) started exactly as vLLM would be.

Covers: run twice (changed=0, same PID), a changed launch restarts once through the handler,
restart-server gives a new PID, teardown stops the whole tree and a second teardown is ok, bad input
stops before launch, and a crashing server fails the play quoting the root cause.
"""

from __future__ import annotations

import json
import os
import pwd
from pathlib import Path

import psutil
import pytest

from tests.fakes.vllm_processes import free_port, kill_leftovers, session_alive
from tests.helpers import play

ROOT = Path(__file__).resolve().parents[2]
FAKE_PKG = ROOT / "tests" / "fakes" / "vllm_pkg"
RENDER = "Render the vLLM launch (argv, 0600 environment file, systemd unit where systemd runs)"
START = "Start the vLLM server unless it runs with this launch, then prove it serves and measure acceptance"
HANDLER = "Restart the vLLM server once if its launch changed"
PLAYBOOK = """\
- name: vllm service
  hosts: all
  roles:
    - common
    - vllm-service
"""


def make_models(base: Path, user: str | None = None) -> dict:
    target, drafter = base / "models" / "target", base / "models" / "dflash"
    for d in (target, drafter):
        d.mkdir(parents=True)
    (target / "config.json").write_text(json.dumps({"architectures": ["Qwen3ForCausalLM"]}))
    (drafter / "config.json").write_text(json.dumps({"architectures": ["DFlashDraftModel"]}))
    if user:
        pw = pwd.getpwnam(user)
        for p in [base / "models", target, drafter, *target.iterdir(), *drafter.iterdir()]:
            os.chown(p, pw.pw_uid, pw.pw_gid)
    return {"target_model": str(target), "drafter_model": str(drafter)}


def host_vars(base: Path, mode: str = "normal", user: str | None = None, **over) -> dict:
    v = {
        "dfp_root": str(base / "dflash"),
        # the system python: the ssh test user can run it (the stand-in needs only the standard library)
        "venv_python": "/usr/bin/python3",
        "served_model_name": "tiny",
        "vllm_port": free_port(),
        "vllm_flavor": "cpu",
        "num_speculative_tokens": 3,
        "vllm_env": {"PYTHONPATH": str(FAKE_PKG), "FAKE_VLLM_MODE": mode},
        "readiness_timeout_s": 20,
        "vllm_stop_grace_s": 5,
        "smoke_max_tokens": 8,
        "acceptance_gate": "warn",
        "nvidia_smi": "/nonexistent/nvidia-smi",
    }
    v.update(make_models(base, user))
    v.update(over)
    return v


def msgs(res) -> list:
    return [(t["task"], t["status"], t["msg"]) for t in res.tasks if t["status"] in ("failed", "changed")]


def one(res, task: str, host: str) -> dict:
    found = [r for r in res.find(task, host) if r.status != "skipped"]
    assert found, f"task {task!r} did not run on {host}: {msgs(res)}"
    return found[-1].result


@pytest.fixture
def cleanup():
    """Kill whatever a test's stand-in servers left (by the start markers in their logs), and fail if any."""
    dirs: list[Path] = []
    yield dirs.append
    leaked = kill_leftovers(dirs)
    assert not leaked, f"stand-in server processes survived: {leaked}"


def lifecycle(host: str, inventory: Path, tmp_path: Path, log_dir: Path) -> None:
    """provision twice, change the launch (one handler restart), restart-server, teardown twice."""
    first = play(PLAYBOOK, inventory, tmp_path)
    assert first.exit_code == 0, msgs(first)
    started = one(first, START, host)
    assert started["changed"] and started["smoke_tokens"] == 24 and started["acceptance_rate"] == 0.0
    assert not first.find(HANDLER, host)[0].changed  # the first start already runs the rendered launch

    second = play(PLAYBOOK, inventory, tmp_path)
    assert second.exit_code == 0 and second.recap[host]["changed"] == 0, msgs(second)
    assert one(second, START, host)["pid"] == started["pid"]

    # check mode with a changed launch: says it would restart, restarts nothing, writes nothing
    launch = (log_dir.parent / "run" / "vllm.launch.json").read_text()
    check = play(PLAYBOOK, inventory, tmp_path, check=True, extra_vars={"vllm_extra_args": ["--max-num-seqs", "2"]})
    assert check.exit_code == 0, msgs(check)
    assert one(check, RENDER, host)["changed"] and one(check, START, host)["stale"]
    assert one(check, HANDLER, host)["changed"] and "would" in one(check, HANDLER, host)["msg"]
    assert (log_dir.parent / "run" / "vllm.launch.json").read_text() == launch
    assert one(play(PLAYBOOK, inventory, tmp_path), START, host)["pid"] == started["pid"]

    changed = play(PLAYBOOK, inventory, tmp_path, extra_vars={"vllm_extra_args": ["--max-num-seqs", "4"]})
    assert changed.exit_code == 0, msgs(changed)
    assert one(changed, RENDER, host)["changed"]
    assert one(changed, START, host).get("stale")  # left to the handler ...
    restarted = one(changed, HANDLER, host)  # ... which restarts exactly once
    assert restarted["changed"] and restarted["pid"] != started["pid"]

    again = play(
        ROOT / "playbooks" / "restart-server.yaml", inventory, tmp_path, extra_vars={"vllm_extra_args": ["--max-num-seqs", "4"]}
    )
    assert again.exit_code == 0, msgs(again)
    new_pid = one(again, START, host)["pid"]
    assert new_pid != restarted["pid"] and one(again, START, host)["changed"]

    down = play(ROOT / "playbooks" / "teardown.yaml", inventory, tmp_path)
    assert down.exit_code == 0, msgs(down)
    assert not session_alive(new_pid)
    down2 = play(ROOT / "playbooks" / "teardown.yaml", inventory, tmp_path)
    assert down2.exit_code == 0 and down2.recap[host]["changed"] == 0, msgs(down2)
    assert any(log_dir.glob("vllm.log*"))  # logs are kept


@pytest.mark.slow
def test_lifecycle_over_local(tmp_path, inventory_file, cleanup):
    hv = host_vars(tmp_path)
    cleanup(Path(hv["dfp_root"]) / "logs")
    inv = inventory_file(local=True, host_vars={"local": hv})
    lifecycle("local", inv, tmp_path, Path(hv["dfp_root"]) / "logs")


@pytest.mark.slow
def test_lifecycle_over_real_ssh(ssh_host, shared_tmp, tmp_path, inventory_file, cleanup):
    hv = host_vars(shared_tmp, user=ssh_host.user)
    cleanup(Path(hv["dfp_root"]) / "logs")
    inv = inventory_file(hosts=[ssh_host], host_vars={ssh_host.name: hv})
    lifecycle(ssh_host.name, inv, tmp_path, Path(hv["dfp_root"]) / "logs")
    # the server ran as the ssh user, not as root
    log = next((Path(hv["dfp_root"]) / "logs").glob("vllm.log*"))
    assert log.stat().st_uid == pwd.getpwnam(ssh_host.user).pw_uid


def test_bad_input_stops_before_launch_naming_the_variable(tmp_path, inventory_file, cleanup):
    hv = host_vars(tmp_path, num_speculative_tokens=0)
    cleanup(Path(hv["dfp_root"]) / "logs")
    inv = inventory_file(local=True, host_vars={"local": hv})
    res = play(PLAYBOOK, inv, tmp_path)
    assert res.exit_code != 0
    failed = one(res, RENDER, "local")
    assert failed["failed"] and "num_speculative_tokens" in failed["msg"]
    assert not res.find(START, "local") and not (Path(hv["dfp_root"]) / "logs" / "vllm.log").exists()


def test_a_vllm_flag_given_with_e_reaches_the_rendered_argv(tmp_path, inventory_file, cleanup):
    """`-e max_num_seqs=8`: no role line passes it; vllm_server's ARGS entry links the variable to --max-num-seqs."""
    hv = host_vars(tmp_path)
    cleanup(Path(hv["dfp_root"]) / "logs")
    inv = inventory_file(local=True, host_vars={"local": hv})
    res = play(PLAYBOOK, inv, tmp_path, check=True, extra_vars={"max_num_seqs": "8"})
    assert res.exit_code == 0, msgs(res)
    argv = one(res, RENDER, "local")["argv"]
    assert argv[argv.index("--max-num-seqs") + 1] == "8"


def test_crash_at_start_fails_the_play_quoting_the_root_cause(tmp_path, inventory_file, cleanup):
    hv = host_vars(tmp_path, mode="crash_start")
    cleanup(Path(hv["dfp_root"]) / "logs")
    inv = inventory_file(local=True, host_vars={"local": hv})
    res = play(PLAYBOOK, inv, tmp_path)
    assert res.exit_code != 0
    failed = one(res, START, "local")
    assert "AssertionError: Tried to load weights" in failed["msg"] and failed["start_failed"]


def test_secret_api_key_never_reaches_the_report(tmp_path, inventory_file, cleanup):
    hv = host_vars(tmp_path, vllm_api_key="sk-role-secret-42")
    cleanup(Path(hv["dfp_root"]) / "logs")
    inv = inventory_file(local=True, host_vars={"local": hv})
    report = tmp_path / "report.json"
    try:
        res = play(PLAYBOOK, inv, tmp_path, report=str(report), diff=True)
        assert res.exit_code == 0, msgs(res)
        assert "sk-role-secret-42" not in report.read_text()
        assert "sk-role-secret-42" not in json.dumps(res.tasks, default=str)
    finally:
        play(ROOT / "playbooks" / "teardown.yaml", inv, tmp_path)


@pytest.mark.slow
def test_rebuild_rolls_back_to_the_previous_environment_when_the_new_one_does_not_serve(tmp_path, inventory_file, cleanup):
    """rebuild: a new environment that breaks the server is switched back, the server restarted on the old one."""
    import numpy as np
    from make_checkpoint import TINY_TARGET_CONFIG, drafter_tensors
    from safetensors.numpy import save_file

    from tests.fakes.wheels import simple_wheel

    wheelhouse = tmp_path / "wheelhouse"
    simple_wheel(wheelhouse, "dfp-a", "1.0")
    simple_wheel(wheelhouse, "dfp-b", "1.0")
    hv = host_vars(tmp_path)
    drafter = Path(hv["drafter_model"])
    (drafter / "config.json").unlink()  # drafter-config writes it from the weights
    table = drafter_tensors(hidden=64, layers=1, heads=4, kv_heads=2, head_dim=32, intermediate=128, k=2, dtype="F32")
    save_file({n: np.zeros(s, dtype=np.float32) for n, (_, s) in table.items()}, str(drafter / "model.safetensors"))
    Path(hv["target_model"], "config.json").write_text(json.dumps(TINY_TARGET_CONFIG))
    hv.pop("venv_python")  # the serving environment's own python, built by the venv role
    hv.update(
        venv_root=str(tmp_path / "venv"),
        vllm_flavor="none",
        venv_installer="pip",
        wheelhouse=str(wheelhouse),
        extra_requirements=["dfp-a==1.0"],
        drafter_mask_token_id=3,
        vllm_env=dict(hv["vllm_env"], FAKE_VLLM_CRASH_IF_IMPORTABLE="dfp_b"),
    )
    cleanup(Path(hv["dfp_root"]) / "logs")
    inv = inventory_file(local=True, host_vars={"local": hv})
    rebuild = ROOT / "playbooks" / "rebuild.yaml"
    try:
        first = play(rebuild, inv, tmp_path)
        assert first.exit_code == 0, msgs(first)
        good_env = os.readlink(tmp_path / "venv" / "current")
        pid = one(first, START, "local")["pid"]
        assert psutil.Process(pid).cmdline()[0].startswith(str(tmp_path / "venv" / good_env))

        bad = play(rebuild, inv, tmp_path, extra_vars={"extra_requirements": ["dfp-a==1.0", "dfp-b==1.0"]})
        assert bad.exit_code != 0
        # the failed start is rescued (the block's rescue leads to the rollback); the verdict is the one failure left
        failed = [t for t in bad.tasks if t["status"] == "failed" and not t["rescued"]]
        assert [t["task"] for t in failed] == ["Fail the rebuild when the new environment had to be rolled back"], msgs(bad)
        assert [t["task"] for t in bad.tasks if t["rescued"]] == [START], msgs(bad)
        assert "AssertionError: Tried to load weights" in failed[0]["msg"] and "rolled back" in failed[0]["msg"]
        assert os.readlink(tmp_path / "venv" / "current") == good_env
        now = one(bad, START, "local")
        assert now["changed"] and psutil.Process(now["pid"]).cmdline()[0].startswith(str(tmp_path / "venv" / good_env))
    finally:
        play(ROOT / "playbooks" / "teardown.yaml", inv, tmp_path)
