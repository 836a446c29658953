"""The drafter-config role through the engine: over `local` and over a real sshd, run twice."""

from __future__ import annotations

import json
import os
import pwd
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from tests.helpers import play

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "drafter_configs"

from make_checkpoint import TINY_TARGET_CONFIG, drafter_tensors, write_sparse_safetensors  # noqa: E402

WRITE = "Write the drafter's config.json from its weights' header and the target's config"
SAY = "Say which rule chose the drafter's target layers"
TARGET = TINY_TARGET_CONFIG
PLAYBOOK = """\
- name: drafter config
  hosts: all
  gather_facts: false
  pre_tasks:
    - import_role: {name: common, tasks_from: variables}
  roles:
    - drafter-config
"""


def make_models(base: Path) -> tuple[Path, Path]:
    """A tiny real drafter (hidden 64, 1 layer, k=2) and an 8-layer target config under base."""
    drafter, target = base / "dflash", base / "target"
    drafter.mkdir()
    target.mkdir()
    table = drafter_tensors(hidden=64, layers=1, heads=4, kv_heads=2, head_dim=32, intermediate=128, k=2, dtype="F32")
    save_file({n: np.zeros(s, dtype=np.float32) for n, (_, s) in table.items()}, str(drafter / "model.safetensors"))
    (target / "config.json").write_text(json.dumps(TARGET))
    return drafter, target


def give_to(user: str, *folders: Path) -> None:
    """Hand the model folders to the ssh test user, as a host's own model folders would be."""
    pw = pwd.getpwnam(user)
    for folder in folders:
        for path in [folder, *folder.iterdir()]:
            os.chown(path, pw.pw_uid, pw.pw_gid)


def test_role_writes_the_config_on_local_and_a_second_run_changes_nothing(tmp_path, inventory_file):
    drafter, target = make_models(tmp_path)
    inv = inventory_file(
        local=True,
        vars={"drafter_model": str(drafter), "target_model": str(target), "drafter_mask_token_id": 3},
    )
    first = play(PLAYBOOK, inv, tmp_path)
    assert first.exit_code == 0, [t["msg"] for t in first.tasks]
    assert first.recap["local"]["changed"] == 1
    written = first.find(WRITE, "local")[0]
    cfg = json.loads((drafter / "config.json").read_text())
    assert written.result["config"] == cfg
    assert cfg["dflash_config"] == {"target_layer_ids": [1, 5], "mask_token_id": 3}
    assert cfg["architectures"] == ["DFlashDraftModel"] and "layer_types" not in cfg
    assert any("guessed by the reference spacing" in w for w in written.result["warnings"])
    said = first.find(SAY, "local")[0].msg
    assert "target_layer_ids [1, 5] (reference)" in said and "mask_token_id 3 (given)" in said

    second = play(PLAYBOOK, inv, tmp_path)
    assert second.exit_code == 0 and second.recap["local"]["changed"] == 0
    assert second.find(WRITE, "local")[0].result["layer_ids_rule"] == "existing"


def test_role_check_mode_reports_the_change_and_writes_nothing(tmp_path, inventory_file):
    drafter, target = make_models(tmp_path)
    inv = inventory_file(
        local=True,
        vars={"drafter_model": str(drafter), "target_model": str(target), "drafter_mask_token_id": 3},
    )
    res = play(PLAYBOOK, inv, tmp_path, check=True, diff=True)
    assert res.exit_code == 0 and res.recap["local"]["changed"] == 1
    assert not (drafter / "config.json").exists()
    assert json.loads(res.find(WRITE, "local")[0].result["diff"]["after"])["num_target_layers"] == 8


def test_role_variables_choose_ids_block_size_and_destination(tmp_path, inventory_file):
    drafter, target = make_models(tmp_path)
    dest = tmp_path / "out.json"
    inv = inventory_file(local=True, vars={"drafter_model": str(drafter), "target_model": str(target)})
    extra = {
        "drafter_mask_token_id": 3,
        "drafter_target_layer_ids": [0, 7],
        "drafter_block_size": 8,
        "drafter_config_dest": str(dest),
    }
    res = play(PLAYBOOK, inv, tmp_path, extra_vars=extra)
    assert res.exit_code == 0, [t["msg"] for t in res.tasks]
    cfg = json.loads(dest.read_text())
    assert cfg["dflash_config"]["target_layer_ids"] == [0, 7] and cfg["block_size"] == 8
    assert not (drafter / "config.json").exists()
    assert res.find(WRITE, "local")[0].result["layer_ids_rule"] == "given"


def test_role_stops_with_a_clear_message_when_the_mask_token_is_unknown(tmp_path, inventory_file):
    drafter, target = make_models(tmp_path)
    inv = inventory_file(local=True, vars={"drafter_model": str(drafter), "target_model": str(target)})
    res = play(PLAYBOOK, inv, tmp_path)
    assert res.exit_code == 2 and res.recap["local"]["failed"] == 1
    msg = res.find(WRITE, "local")[0].msg
    assert "mask_token_id is needed" in msg and "drafter_mask_token_id" in msg
    assert not res.find(SAY, "local")
    assert not (drafter / "config.json").exists()


@pytest.mark.ssh
def test_role_over_ssh_reads_the_header_on_the_host_and_a_second_run_changes_nothing(
    tmp_path, shared_tmp, ssh_host, inventory_file
):
    drafter, target = make_models(shared_tmp)
    give_to(ssh_host.user, drafter, target)
    inv = inventory_file(
        hosts=[ssh_host],
        vars={"drafter_model": str(drafter), "target_model": str(target), "drafter_mask_token_id": 3},
    )
    first = play(PLAYBOOK, inv, tmp_path)
    assert first.exit_code == 0, [t["msg"] for t in first.tasks]
    assert first.recap[ssh_host.name]["changed"] == 1
    config = drafter / "config.json"
    assert config.stat().st_uid == pwd.getpwnam(ssh_host.user).pw_uid  # written on the host, by its user
    assert json.loads(config.read_text())["dflash_config"]["target_layer_ids"] == [1, 5]
    second = play(PLAYBOOK, inv, tmp_path)
    assert second.exit_code == 0 and second.recap[ssh_host.name]["changed"] == 0


@pytest.mark.ssh
def test_role_over_ssh_reads_a_multi_gb_checkpoint_header_in_milliseconds(tmp_path, shared_tmp, ssh_host, inventory_file):
    drafter, target = shared_tmp / "d27", shared_tmp / "t27"
    drafter.mkdir()
    target.mkdir()
    published = json.loads((FIXTURES / "qwen3.5-27b-dflash.json").read_text())
    table = drafter_tensors(hidden=5120, layers=5, heads=32, kv_heads=8, head_dim=128, intermediate=17408, k=5)
    write_sparse_safetensors(str(drafter / "model.safetensors"), table, {"format": "pt"})
    (target / "config.json").write_text((FIXTURES / "targets" / "qwen3.5-27b.json").read_text())
    give_to(ssh_host.user, drafter, target)
    inv = inventory_file(
        hosts=[ssh_host],
        vars={"drafter_model": str(drafter), "target_model": str(target), "drafter_mask_token_id": 248070},
    )
    res = play(PLAYBOOK, inv, tmp_path)
    assert res.exit_code == 0, [t["msg"] for t in res.tasks]
    result = res.find(WRITE, ssh_host.name)[0].result
    assert result["header_bytes_read"] < 10_000 and result["header_read_ms"] < 50
    cfg = json.loads((drafter / "config.json").read_text())
    assert cfg["dflash_config"]["target_layer_ids"] == published["dflash_config"]["target_layer_ids"]
    assert result["multimodal_target"] is True
