"""The models role through the engine, with drafter-config after it: Hub ids fetched from a real HF-compatible
server (olah), the drafter's config written into the snapshot only where the repository has none, a
published one kept as fetched, and the token nowhere but in the request."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.fakes.hub import FETCH, Gate
from tests.helpers import play_roles
from tests.roles.test_drafter_config_role import TARGET, WRITE, make_models


def publish_pair(hub, tmp_path: Path, name: str, with_config: dict | None = None) -> tuple[str, str]:
    drafter, _ = make_models(tmp_path / "src")
    target_id, drafter_id = f"dfp/{name}-target", f"dfp/{name}-dflash"
    hub.publish(target_id, {"config.json": json.dumps(TARGET).encode(), "tokenizer.json": b"{}"})
    files = {"model.safetensors": (drafter / "model.safetensors").read_bytes()}
    if with_config is not None:
        files["config.json"] = json.dumps(with_config, indent=1).encode()
    hub.publish(drafter_id, files)
    return target_id, drafter_id


def host_vars(tmp_path: Path, endpoint: str, target_id: str, drafter_id: str, **more) -> dict:
    return {"dfp_root": str(tmp_path / "root"), "hf_endpoint": endpoint, "target_model": target_id,
            "drafter_model": drafter_id, "drafter_mask_token_id": 3, **more}


def test_hub_ids_are_fetched_and_the_drafter_config_is_written_beside_the_verified_files(hub, tmp_path, inventory_file):
    (tmp_path / "src").mkdir()
    target_id, drafter_id = publish_pair(hub, tmp_path, "noconfig")
    inv = inventory_file(local=True, vars=host_vars(tmp_path, hub.endpoint, target_id, drafter_id))
    first = play_roles(tmp_path, inv, ["models", "drafter-config"])
    assert first.exit_code == 0, [t["msg"] for t in first.tasks]
    fetched = first.find(FETCH, "local")[0].result
    snap = Path(fetched["drafter_path"])
    assert snap.is_relative_to(tmp_path / "root" / "hf" / "hub")
    written = first.find(WRITE, "local")[0].result
    assert written["path"] == str(snap / "config.json") and not (snap / "config.json").is_symlink()
    assert (snap / "model.safetensors").is_symlink()  # the verified file is untouched
    second = play_roles(tmp_path, inv, ["models", "drafter-config"])
    assert second.exit_code == 0 and second.recap["local"]["changed"] == 0, [t["msg"] for t in second.tasks]


def test_a_published_drafter_config_is_kept_as_fetched_and_checked(hub, tmp_path, inventory_file):
    (tmp_path / "src").mkdir()
    # the config drafter-config itself would write for this pair, published with the weights (as the Hub's drafters are)
    (tmp_path / "src2").mkdir()
    local_drafter, local_target = make_models(tmp_path / "src2")
    seed_inv = inventory_file(local=True, name="seed.yaml", vars={"dfp_root": str(tmp_path / "seed"), "drafter_model": str(local_drafter),
                                                                   "target_model": str(local_target),
                                                                   "drafter_mask_token_id": 3})
    assert play_roles(tmp_path, seed_inv, ["models", "drafter-config"]).exit_code == 0
    published = json.loads((local_drafter / "config.json").read_text())
    target_id, drafter_id = publish_pair(hub, tmp_path, "published", with_config=published)

    inv = inventory_file(local=True, vars=host_vars(tmp_path, hub.endpoint, target_id, drafter_id))
    res = play_roles(tmp_path, inv, ["models", "drafter-config"])
    assert res.exit_code == 0, [t["msg"] for t in res.tasks]
    kept = res.find(WRITE, "local")[0].result
    assert not kept["changed"] and kept["published"] and "kept as fetched" in kept["msg"]
    snap = Path(res.find(FETCH, "local")[0].result["drafter_path"])
    assert (snap / "config.json").is_symlink()  # still the verified blob

    asks_other = inventory_file(local=True, name="other.yaml", vars=host_vars(
        tmp_path, hub.endpoint, target_id, drafter_id, drafter_target_layer_ids=[0, 3]))
    refused = play_roles(tmp_path, asks_other, ["models", "drafter-config"])
    assert refused.exit_code != 0
    msg = refused.find(WRITE, "local")[0].msg
    assert "published config.json" in msg and "does not alter a verified snapshot" in msg and "dflash_config" in msg
    assert (snap / "config.json").is_symlink()


def test_the_token_reaches_the_gated_mirror_and_no_output(hub, tmp_path, inventory_file, capsys):
    (tmp_path / "src").mkdir()
    target_id, drafter_id = publish_pair(hub, tmp_path, "gated")
    token = "hf_dfpRoleToken0123456789abc"
    gate = Gate(hub.endpoint, token=token)
    try:
        inv = inventory_file(local=True, vars=host_vars(tmp_path, gate.endpoint, target_id, drafter_id, hf_token=token))
        report = tmp_path / "report.json"
        res = play_roles(tmp_path, inv, ["models", "drafter-config"], report=str(report), verbose=3, quiet=False, diff=True)
        assert res.exit_code == 0, [t["msg"] for t in res.tasks]
        assert f"Bearer {token}" in gate.auth_seen
        out = capsys.readouterr()
        assert token not in out.out + out.err
        assert token not in report.read_text()
        for path in (tmp_path / "root").rglob("*"):
            if path.is_file() and not path.is_symlink():
                assert token.encode() not in path.read_bytes(), path
        assert all(token not in " ".join(open(f"/proc/{pid}/cmdline").read().split("\0"))
                   for pid in os.listdir("/proc") if pid.isdigit() and os.path.exists(f"/proc/{pid}/cmdline"))
    finally:
        gate.stop()
