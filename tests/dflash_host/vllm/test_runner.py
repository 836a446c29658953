"""The model runner a drafter needs (dflash_host/vllm/runner.py), through the launch's resolve.

The drafter configs are the published ones (tests/fixtures/drafter_configs); the DFlash 2 one is the 27B
drafter's config with `architectures: ["DFlash2DraftModel"]`, as vLLM's own speculators loader sets it for a
DFlash 2 checkpoint (transformers_utils/configs/speculators/algos.py, update_dflash2).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from dflash_host.module import ModuleError
from dflash_host.vllm import launch
from library.vllm_server import ARGS

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "drafter_configs"


def models(tmp_path: Path, drafter_arch: str | None) -> tuple:
    target, drafter = tmp_path / "target", tmp_path / "dflash"
    target.mkdir()
    drafter.mkdir()
    shutil.copy(FIXTURES / "targets" / "qwen3.5-27b.json", target / "config.json")
    cfg = json.loads((FIXTURES / "qwen3.5-27b-dflash.json").read_text())
    if drafter_arch:
        cfg["architectures"] = [drafter_arch]
    (drafter / "config.json").write_text(json.dumps(cfg))
    return target, drafter


def resolve(tmp_path: Path, arch: str | None, env: dict | None = None) -> dict:
    target, drafter = models(tmp_path, arch)
    args = {"venv_python": "/env/bin/python", "target_model": str(target), "drafter_model": str(drafter),
            "served_model_name": "t", "host": "127.0.0.1", "port": 8011, "flavor": "cuda",
            "num_speculative_tokens": 7, "speculative_method": "dflash", "env": env or {}}
    return launch.resolve(args, None, ARGS)


def test_a_dflash2_drafter_gets_the_v2_runner_and_says_so(tmp_path):
    spec = resolve(tmp_path, "DFlash2DraftModel")
    assert spec["env"]["VLLM_USE_V2_MODEL_RUNNER"] == "1"
    assert spec["runner_env"] == {"VLLM_USE_V2_MODEL_RUNNER": "1"}
    assert spec["expected_architectures"][-1] == "DFlash2DraftModel"


def test_a_dflash1_drafter_leaves_the_runner_to_vllm(tmp_path):
    spec = resolve(tmp_path, None)  # the published config: DFlashDraftModel
    assert "VLLM_USE_V2_MODEL_RUNNER" not in spec["env"] and spec["runner_env"] == {}


def test_vllm_env_choosing_v2_itself_is_kept(tmp_path):
    spec = resolve(tmp_path, "LiLiCorrDraftModel", {"VLLM_USE_V2_MODEL_RUNNER": "1"})
    assert spec["env"]["VLLM_USE_V2_MODEL_RUNNER"] == "1" and spec["runner_env"] == {}


@pytest.mark.parametrize("value", ["0", " 0", "00"])
def test_vllm_env_turning_v2_off_is_refused_naming_file_field_and_fix(tmp_path, value):
    with pytest.raises(ModuleError) as err:
        resolve(tmp_path, "DFlash2DraftModel", {"VLLM_USE_V2_MODEL_RUNNER": value})
    msg = str(err.value)
    assert str(tmp_path / "dflash" / "config.json") in msg
    assert "architectures ['DFlash2DraftModel']" in msg
    assert "vllm_env sets VLLM_USE_V2_MODEL_RUNNER" in msg and "Remove VLLM_USE_V2_MODEL_RUNNER from vllm_env" in msg
    assert "\n" not in msg


def test_vllm_env_turning_v2_off_is_fine_for_a_dflash1_drafter(tmp_path):
    spec = resolve(tmp_path, None, {"VLLM_USE_V2_MODEL_RUNNER": "0"})
    assert spec["env"]["VLLM_USE_V2_MODEL_RUNNER"] == "0"
