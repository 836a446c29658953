"""The venv and flash-attn-pinning roles through the engine, over `local` and a real sshd: a wheelhouse
pushed from the control node, an offline build, the pinning decided from the (stand-in) GPU's facts,
run twice with no change; check mode changes nothing; bad input keeps the current environment."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
from pathlib import Path

import pytest

from tests.fakes.gpu_holder import FakeGpu
from tests.fakes.wheels import fa4_wheel, simple_wheel
from tests.helpers import play

pytestmark = pytest.mark.usefixtures("clean_pip_config")  # this machine's pip setup stays out

BUILD = "Build the serving environment beside the current one, verify it by import and switch to it"
PUSH = "Push the wheelhouse from the control node for an offline install"
PIN = "Pin the flash-attn line this GPU allows in the serving environment and remove conflicting ones"
SAY_PIN = "Say which flash-attn line the GPU got and why"
PLAYBOOK = """\
- name: serving environment
  hosts: all
  gather_facts: true
  pre_tasks:
    - import_role: {name: common, tasks_from: variables}
  roles:
    - venv
    - flash-attn-pinning
"""
A100 = [{"name": "NVIDIA A100-SXM4-80GB", "uuid": "GPU-a100-0000", "compute_cap": "8.0", "total_mib": 81920}]


@pytest.fixture
def ampere():
    fake = FakeGpu(gpus=A100)
    yield fake
    fake.cleanup()


@pytest.fixture
def wheelhouse(tmp_path):
    wh = tmp_path / "wheelhouse"
    simple_wheel(wh, "dfp-a", "1.0")
    fa4_wheel(wh)
    return wh


def role_vars(root: Path, wheelhouse: Path, gpu: FakeGpu, **extra) -> dict:
    v = {
        "venv_root": str(root),
        "vllm_flavor": "none",
        "extra_requirements": ["dfp-a==1.0", "flash-attn-4"],  # fa4 on an A100: the pinning removes it
        "wheelhouse": str(wheelhouse),
        "nvidia_smi": gpu.nvidia_smi,
        # pip, so the outcome does not depend on whether an earlier run left uv in the tool folder
        # (the e2e tests do); uv's own offline path is covered in tests/library/test_python_env.py.
        "venv_installer": "pip",
    }
    v.update(extra)
    return v


def msgs(res) -> list:
    return [f"{t['task']}: {t['msg']}" for t in res.tasks]


def env_dists(python: str, user: str | None = None) -> dict:
    code = "import importlib.metadata as md, json; print(json.dumps({d.metadata['Name']: d.version for d in md.distributions()}))"
    argv = [python, "-c", code] if not user else ["runuser", "-u", user, "--", python, "-c", code]
    return json.loads(subprocess.run(argv, capture_output=True, text=True, check=True).stdout)


def check_built_and_pinned(first, host: str, root: Path) -> dict:
    assert first.exit_code == 0, msgs(first)
    [build] = first.find(BUILD, host)
    env = build.result
    assert build.status == "changed" and env["specs"] == ["dfp-a==1.0", "flash-attn-4"] and env["installer"] == "pip"
    assert os.readlink(root / "current") == f"envs/{env['hash']}"
    [pin] = first.find(PIN, host)
    assert pin.status == "changed" and pin.result["removed"] == ["flash-attn-4"], pin.msg
    assert pin.result["compute_capability"] == "8.0" and pin.result["line"] is None
    assert "no separate flash-attn" in first.find(SAY_PIN, host)[0].msg
    return env


@pytest.mark.slow
def test_roles_build_offline_pin_by_gpu_and_a_second_run_changes_nothing(tmp_path, inventory_file, wheelhouse, ampere):
    root = tmp_path / "venv"
    inv = inventory_file(local=True, vars=role_vars(root, wheelhouse, ampere))
    first = play(PLAYBOOK, inv, tmp_path)
    env = check_built_and_pinned(first, "local", root)
    assert first.find(PUSH, "local")[0].status == "changed"
    assert sorted(os.listdir(root / "wheelhouse")) == sorted(os.listdir(wheelhouse))
    dists = env_dists(str(root / "current" / "bin" / "python"))
    assert dists["dfp-a"] == "1.0" and "flash-attn-4" not in dists

    second = play(PLAYBOOK, inv, tmp_path)
    assert second.exit_code == 0 and second.recap["local"]["changed"] == 0, msgs(second)
    assert "nothing to do" in second.find(BUILD, "local")[0].msg
    assert second.find(BUILD, "local")[0].result["hash"] == env["hash"]


def test_check_mode_on_a_fresh_host_changes_nothing(tmp_path, inventory_file, wheelhouse, ampere):
    root = tmp_path / "venv"
    inv = inventory_file(local=True, vars=role_vars(root, wheelhouse, ampere))
    res = play(PLAYBOOK, inv, tmp_path, check=True, diff=True)
    assert res.exit_code == 0, msgs(res)
    build = res.find(BUILD, "local")[0]
    assert build.status == "changed" and "would build" in build.msg
    assert build.result["diff"]["after"]["specs"] == ["dfp-a==1.0", "flash-attn-4"]
    assert not (root / "envs").exists() and not (root / "wheelhouse").exists()


@pytest.mark.slow
def test_unknown_flavor_fails_clearly_and_keeps_the_current_environment(tmp_path, inventory_file, wheelhouse, ampere):
    root = tmp_path / "venv"
    inv = inventory_file(local=True, vars=role_vars(root, wheelhouse, ampere, extra_requirements=["dfp-a==1.0"]))
    first = play(PLAYBOOK, inv, tmp_path)
    assert first.exit_code == 0, msgs(first)
    before = os.readlink(root / "current")
    bad = play(PLAYBOOK, inv, tmp_path, extra_vars={"vllm_flavor": "rocm"})
    assert bad.exit_code == 2
    [build] = bad.find(BUILD, "local")
    assert build.status == "failed" and "'rocm'" in build.msg and "cuda, cpu, none" in build.msg
    assert not bad.find(PIN, "local") and os.readlink(root / "current") == before


@pytest.mark.slow
def test_missing_package_in_the_pushed_wheelhouse_names_it(tmp_path, inventory_file, wheelhouse, ampere):
    root = tmp_path / "venv"
    inv = inventory_file(local=True, vars=role_vars(root, wheelhouse, ampere, extra_requirements=["dfp-absent==2.0"]))
    res = play(PLAYBOOK, inv, tmp_path)
    assert res.exit_code == 2
    msg = res.find(BUILD, "local")[0].msg
    assert "dfp-absent==2.0" in msg and "wheelhouse" in msg and "pip download" in msg
    assert not os.path.lexists(root / "current")


@pytest.mark.slow
@pytest.mark.ssh
def test_roles_over_ssh_build_as_the_hosts_user_and_a_second_run_changes_nothing(
    tmp_path, shared_tmp, ssh_host, inventory_file, wheelhouse, ampere
):
    root = shared_tmp / "venv"
    inv = inventory_file(hosts=[ssh_host], vars=role_vars(root, wheelhouse, ampere))
    first = play(PLAYBOOK, inv, tmp_path)
    env = check_built_and_pinned(first, ssh_host.name, root)
    assert os.stat(Path(env["path"]) / ".dfp-env.json").st_uid == pwd.getpwnam(ssh_host.user).pw_uid
    dists = env_dists(str(root / "current" / "bin" / "python"), user=ssh_host.user)
    assert dists["dfp-a"] == "1.0" and "flash-attn-4" not in dists

    second = play(PLAYBOOK, inv, tmp_path)
    assert second.exit_code == 0 and second.recap[ssh_host.name]["changed"] == 0, msgs(second)
