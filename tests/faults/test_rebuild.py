"""The nightly rebuild (playbooks/rebuild.yaml) through the engine on `local`, fast: real environments built
by pip from local wheels (`vllm_flavor: none`), the stand-in server (tests/fakes/fake_vllm.py) started from
each environment's own python exactly as vLLM would be, real processes, real files.

- a newer version the unchanged pins allow breaks the server: the rebuild rolls back, the old environment
  stays current and its server is restarted and healthy, exit 2, and the reports say so and why;
- unchanged pins: every night a new environment (a new folder, `current` switched, the previous one kept for
  rollback, older ones pruned), each phase timed, the downtime measured; a provision afterwards changes nothing;
- rebuild_mode locked installs exactly the versions recorded for the current environment, latest the newest;
- locked after the pins changed stops with a clear error before anything is built or stopped.
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request
import xml.etree.ElementTree as ET
from pathlib import Path

import psutil
import pytest

from tests.fakes.served import PLAYBOOKS, START, msgs, server_vars
from tests.fakes.vllm_processes import kill_leftovers
from tests.fakes.wheels import simple_wheel
from tests.helpers import play

pytestmark = pytest.mark.usefixtures("clean_pip_config")  # this machine's pip setup stays out

FAIL = "Fail the rebuild when the new environment had to be rolled back"
BUILD = "Build the serving environment beside the current one, verify it by import and switch to it"
SWITCH = "Switch `current` to the new environment now that the server serves on it"


@pytest.fixture
def host(tmp_path, inventory_file):
    """(inventory, host vars, wheelhouse) of `local` with pins dfp-a>=1.0 and dfp-a 1.0 in the wheelhouse;
    the stand-in server crashes at start when its environment can import dfp_b. Torn down afterwards."""
    import numpy as np
    from make_checkpoint import TINY_TARGET_CONFIG, drafter_tensors
    from safetensors.numpy import save_file

    wheelhouse = tmp_path / "wheelhouse"
    simple_wheel(wheelhouse, "dfp-a", "1.0")
    hv = server_vars(tmp_path, fake={"crash_if_importable": "dfp_b"})
    hv.pop("venv_python")  # the serving environment's own python, built by the venv role
    drafter = Path(hv["drafter_model"])
    (drafter / "config.json").unlink()  # drafter-config writes it from the weights
    table = drafter_tensors(hidden=64, layers=1, heads=4, kv_heads=2, head_dim=32, intermediate=128, k=2, dtype="F32")
    save_file({n: np.zeros(s, dtype=np.float32) for n, (_, s) in table.items()}, str(drafter / "model.safetensors"))
    Path(hv["target_model"], "config.json").write_text(json.dumps(TINY_TARGET_CONFIG))
    hv.update(
        venv_root=str(tmp_path / "venv"),
        vllm_flavor="none",
        venv_installer="pip",
        wheelhouse=str(wheelhouse),
        extra_requirements=["dfp-a>=1.0"],
        drafter_mask_token_id=3,
    )
    inv = inventory_file(local=True, host_vars={"local": hv})
    yield inv, hv, wheelhouse
    play(PLAYBOOKS / "teardown.yaml", inv, tmp_path)
    leaked = kill_leftovers([Path(hv["dfp_root"]) / "logs"])
    assert not leaked, f"stand-in server processes survived teardown: {leaked}"


def rebuild(inv: Path, tmp_path: Path, night: int, **extra_vars):
    """One night: the rebuild with --report and --junit; returns (result, this host's rebuild section, junit)."""
    report, junit = tmp_path / f"night{night}.json", tmp_path / f"night{night}.xml"
    res = play(PLAYBOOKS / "rebuild.yaml", inv, tmp_path, report=str(report), junit=str(junit), extra_vars=extra_vars)
    data = json.loads(report.read_text())
    return res, data["hosts"]["local"]["rebuild"], ET.parse(junit).getroot()


def current(hv: dict) -> str:
    return os.readlink(Path(hv["venv_root"]) / "current")


def serving_from(hv: dict, res) -> tuple[int, str]:
    """(PID, the folder its python runs from) of the server the last start task left, proven healthy now."""
    found = [r for r in res.find(START, "local") if r.status != "skipped"]
    pid = found[-1].result["pid"]
    with urllib.request.urlopen(f"http://127.0.0.1:{hv['vllm_port']}/health", timeout=5) as answer:
        assert answer.status == 200
    exe = psutil.Process(pid).cmdline()[0]
    return pid, os.path.relpath(os.path.dirname(os.path.dirname(exe)), hv["venv_root"])


def installed(hv: dict, env: str, dist: str) -> str:
    python = Path(hv["venv_root"]) / env / "bin" / "python"
    code = f"import importlib.metadata as md; print(md.version({dist!r}))"
    return subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def phases(section: dict) -> dict:
    return {p["name"]: p for p in section["phases"]}


def junit_cases(root: ET.Element) -> dict:
    suite = next(s for s in root.iter("testsuite") if s.get("name") == "local rebuild")
    out = {}
    for case in suite.iter("testcase"):
        status = "failed" if case.find("failure") is not None else "skipped" if case.find("skipped") is not None else "passed"
        out[case.get("name")] = status
    return out


@pytest.mark.slow
def test_a_newer_version_the_pins_allow_that_breaks_the_server_is_rolled_back(tmp_path, host):
    inv, hv, wheelhouse = host
    first, night1, _ = rebuild(inv, tmp_path, 1)
    assert first.exit_code == 0, msgs(first)
    good = current(hv)
    first_pid, first_env = serving_from(hv, first)
    assert first_env == good

    # Upstream publishes dfp-a 2.0, allowed by the unchanged pin dfp-a>=1.0; it pulls in dfp-b, which imports
    # fine (the build's import check passes) but makes the server fail at start.
    simple_wheel(wheelhouse, "dfp-a", "2.0", requires=["dfp-b"])
    simple_wheel(wheelhouse, "dfp-b", "1.0")
    bad, night2, junit = rebuild(inv, tmp_path, 2)

    assert bad.exit_code == 2, msgs(bad)
    # the failed start is rescued (the block's rescue leads to the rollback); the verdict is the one failure left
    failed = [t for t in bad.tasks if t["status"] == "failed" and not t["rescued"]]
    assert [t["task"] for t in failed] == [FAIL], msgs(bad)
    assert [t["task"] for t in bad.tasks if t["rescued"]] == [START], msgs(bad)
    assert "AssertionError: Tried to load weights" in failed[0]["msg"] and "rolled back" in failed[0]["msg"]
    assert current(hv) == good  # the previous environment is current (it never stopped being)
    pid, env = serving_from(hv, bad)
    assert env == good and pid != first_pid  # restarted on it, and healthy
    assert night2["rolled_back"] is True and night2["switched"] is False and night2["serving"] is True
    assert night2["failed_phase"] == "serve" and "AssertionError: Tried to load weights" in night2["reason"]
    assert night2["old_env"] == good.split("/")[1] and night2["new_env"] != night2["old_env"]
    assert night2["old_versions"]["dfp-a"] == "1.0" and night2["new_versions"]["dfp-a"] == "2.0"
    assert night2["mode"] == "latest" and night2["downtime_s"] > 0
    status = {name: p["status"] for name, p in phases(night2).items()}
    assert status == {
        "prepare": "passed", "build": "passed", "flash-attn": "passed", "models": "passed",
        "serve": "failed", "switch": "skipped", "rollback": "passed", "verdict": "failed",
    }, night2["phases"]
    assert junit_cases(junit) == status
    assert phases(night2)["serve"]["server"]["start_failed"] and phases(night2)["rollback"]["server"]["ready_s"] > 0

    # The pin tightened to exclude the broken version: the next night converges again.
    third, night3, _ = rebuild(inv, tmp_path, 3, extra_requirements=["dfp-a>=1.0,<2"])
    assert third.exit_code == 0 and night3["rolled_back"] is False and night3["switched"], msgs(third)
    assert serving_from(hv, third)[1] == current(hv) != good and night3["new_versions"]["dfp-a"] == "1.0"


@pytest.mark.slow
def test_unchanged_pins_build_a_new_environment_every_night_and_keep_the_previous(tmp_path, host):
    inv, hv, _ = host
    envs = []
    for night in (1, 2, 3):
        res, section, junit = rebuild(inv, tmp_path, night)
        assert res.exit_code == 0, msgs(res)
        built = res.find(BUILD, "local")[0].result
        assert built["built"] and built["fresh"] and not built["switched"], built["msg"]
        assert res.find(SWITCH, "local")[0].status == "changed"
        envs.append(built["env"])
        assert current(hv) == f"envs/{built['env']}" and serving_from(hv, res)[1] == f"envs/{built['env']}"
        assert section["new_env"] == built["env"] and section["old_env"] == (envs[-2] if night > 1 else None)
        assert section["switched"] and not section["rolled_back"] and section["reason"] is None
        assert section["new_versions"]["dfp-a"] == "1.0" and 0 < section["downtime_s"] < 20
        timed = phases(section)
        assert list(timed) == ["prepare", "build", "flash-attn", "models", "serve", "switch", "rollback", "verdict"]
        assert timed["rollback"]["status"] == "skipped" and timed["build"]["duration_s"] > 0
        assert timed["serve"]["server"]["ready_s"] > 0 and timed["serve"]["server"]["smoke_s"] > 0
        assert set(junit_cases(junit).values()) == {"passed", "skipped"}
    assert len(set(envs)) == 3 and all(e.startswith(envs[0][:16]) for e in envs)  # same hash, new folder
    # keep 1: the previous one stays for rollback, the one before is pruned
    assert sorted(os.listdir(Path(hv["venv_root"]) / "envs")) == sorted(envs[1:])

    after = play(PLAYBOOKS / "provision.yaml", inv, tmp_path)
    assert after.exit_code == 0 and after.recap["local"]["changed"] == 0, msgs(after)


@pytest.mark.slow
def test_locked_installs_the_recorded_versions_and_latest_the_newest_the_pins_allow(tmp_path, host):
    inv, hv, wheelhouse = host
    first, _, _ = rebuild(inv, tmp_path, 1)
    assert first.exit_code == 0, msgs(first)
    lock = Path(hv["venv_root"]) / current(hv) / ".dfp-lock.txt"
    assert "dfp-a==1.0" in lock.read_text().splitlines()

    simple_wheel(wheelhouse, "dfp-a", "2.0")  # newer, allowed by dfp-a>=1.0
    locked, section, _ = rebuild(inv, tmp_path, 2, rebuild_mode="locked")
    assert locked.exit_code == 0, msgs(locked)
    assert section["mode"] == "locked" and section["new_versions"]["dfp-a"] == "1.0"
    assert installed(hv, current(hv), "dfp-a") == "1.0" and section["new_env"] != section["old_env"]

    latest, section, _ = rebuild(inv, tmp_path, 3)
    assert latest.exit_code == 0, msgs(latest)
    assert section["mode"] == "latest" and section["old_versions"]["dfp-a"] == "1.0"
    assert section["new_versions"]["dfp-a"] == "2.0" and installed(hv, current(hv), "dfp-a") == "2.0"


def test_locked_after_the_pins_changed_stops_before_anything_is_built_or_stopped(tmp_path, host):
    inv, hv, _ = host
    first, _, _ = rebuild(inv, tmp_path, 1)
    assert first.exit_code == 0, msgs(first)
    pid, env = serving_from(hv, first)
    before = sorted(os.listdir(Path(hv["venv_root"]) / "envs"))

    res, section, _ = rebuild(inv, tmp_path, 2, rebuild_mode="locked", extra_requirements=["dfp-a==1.0"])
    assert res.exit_code == 2
    [build] = res.find(BUILD, "local")
    assert build.status == "failed" and "rebuild_mode locked" in build.msg and "rebuild_mode latest" in build.msg
    assert section["failed_phase"] == "build" and not section["rolled_back"] and not section["switched"]
    assert sorted(os.listdir(Path(hv["venv_root"]) / "envs")) == before and current(hv) == env
    assert psutil.Process(pid).is_running() and serving_from(hv, first) == (pid, env)
