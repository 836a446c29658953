"""End to end: provision from Hub ids. The tiny pair is generated once and published on a real HF-compatible
server (olah); a host whose target_model and drafter_model are Hub ids gets both fetched and verified, the
drafter's published config.json kept, and a real `vllm serve` (CPU) serving the snapshots offline; a second
provision changes nothing and fetches 0 bytes; teardown --purge-models removes what was fetched."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.test_local_e2e import E2E_ROOT, START, host_vars, msgs, result
from tests.fakes.hub import FETCH
from tests.fakes.vllm_processes import kill_leftovers
from tests.helpers import play

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

DRAFTER = "Write the drafter's config.json from its weights' header and the target's config"
GENERATE = """\
- name: generate the tiny pair to publish
  hosts: all
  gather_facts: false
  roles: [common, venv, tiny-models, drafter-config]
"""


def published_files(folder: Path) -> dict:
    """A model folder as a Hub repository holds it: its files, without the tool's own markers."""
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file() and not p.name.startswith(".")}


@pytest.fixture(scope="module")
def published_pair(hub, tmp_path_factory):
    """dfp/tiny-target and dfp/tiny-dflash on the hub: the tiny pair, the drafter with the config drafter-config wrote."""
    from engine.api import run_playbook

    src = dict(host_vars("local"), dfp_root=str(E2E_ROOT / "hub-src"),
               target_model=str(E2E_ROOT / "hub-src" / "models" / "tiny-target"),
               drafter_model=str(E2E_ROOT / "hub-src" / "models" / "tiny-dflash"))
    work = tmp_path_factory.mktemp("hubsrc")
    (work / "gen.yaml").write_text(GENERATE)
    made = run_playbook(str(work / "gen.yaml"), inventory={"all": {"hosts": {"local": dict(src, ansible_connection="local")}}})
    assert made.exit_code == 0, msgs(made)
    hub.publish("dfp/tiny-target", published_files(Path(src["target_model"])))
    hub.publish("dfp/tiny-dflash", published_files(Path(src["drafter_model"])))
    return "dfp/tiny-target", "dfp/tiny-dflash"


def test_provision_from_hub_ids_serves_them_offline_and_a_second_run_fetches_nothing(hub, published_pair, inventory_file):
    target_id, drafter_id = published_pair
    dfp_root = E2E_ROOT / "hub"
    hv = dict(host_vars("local"), dfp_root=str(dfp_root), generate_tiny_models=False, target_model=target_id,
              drafter_model=drafter_id, hf_endpoint=hub.endpoint)
    inv = inventory_file(local=True, host_vars={"local": hv})
    try:
        first = play("provision", inv)
        assert first.exit_code == 0, msgs(first)
        fetched = result(first, FETCH, "local")
        assert fetched["models"]["target"]["bytes_fetched"] > 0 and fetched["models"]["drafter"]["bytes_fetched"] > 0
        kept = result(first, DRAFTER, "local")
        assert kept["published"] and not kept["changed"]
        started = result(first, START, "local")
        assert started["resolved_architectures"] == ["Qwen3ForCausalLM", "DFlashDraftModel"], started
        assert started["smoke_tokens"] > 0
        launch = json.loads((dfp_root / "run" / "vllm.launch.json").read_text())
        assert fetched["target_path"] in launch["argv"]  # the snapshot: its commit is in the launch's fingerprint
        assert fetched["models"]["target"]["commit"] in fetched["target_path"]
        assert launch["env"].get("HF_HUB_OFFLINE") == "1"

        second = play("provision", inv)
        assert second.exit_code == 0 and second.recap["local"]["changed"] == 0, msgs(second)
        again = result(second, FETCH, "local")["models"]
        assert again["target"]["bytes_fetched"] == 0 and again["drafter"]["bytes_fetched"] == 0
        assert result(second, START, "local")["pid"] == started["pid"]

        down = play("teardown", inv, extra_vars={"teardown_purge_models": True})
        assert down.exit_code == 0, msgs(down)
        assert not list((dfp_root / "hf" / "hub").glob("models--*"))
    finally:
        leaked = kill_leftovers([dfp_root / "logs"])
        assert not leaked, f"vLLM processes survived: {leaked}"
