"""A fleet takes each file from outside once: models_via control_node over 8 real sshd hosts, counted in the
upstream's (olah's) access log; and the air-gapped push from a control-node folder, sending only what a host
lacks."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.fakes.hub import FETCH
from tests.helpers import play_roles

pytestmark = [pytest.mark.ssh]

FILES = {"config.json": json.dumps({"architectures": ["Qwen3ForCausalLM"]}).encode(),
         "model-00001-of-00002.safetensors": os.urandom(400_000), "model-00002-of-00002.safetensors": os.urandom(300_000),
         "tokenizer.json": b'{"version": "1.0"}'}


def fleet_inventory(inventory_file, hosts, tmp_path: Path, tag: str, **common) -> Path:
    return inventory_file(hosts=hosts, host_vars={h.name: {"dfp_root": f"~/fleet-{tag}/{h.name}"} for h in hosts},
                          vars={"drafter_model": None, "models_relay_cache": str(tmp_path / "relay"), **common})


def snapshots(res, hosts) -> dict:
    return {h.name: res.find(FETCH, h.name)[0].result for h in hosts}


@pytest.fixture
def clean_fleet(ssh_hosts):
    yield
    home = Path(os.path.expanduser(f"~{ssh_hosts[0].user}"))
    for d in home.glob("fleet-*"):
        shutil.rmtree(d, ignore_errors=True)


def test_eight_hosts_take_each_file_from_the_upstream_once(hub, ssh_hosts, inventory_file, tmp_path, clean_fleet):
    hosts = ssh_hosts[:8]
    hub.publish("dfp/fleet", FILES)
    inv = fleet_inventory(inventory_file, hosts, tmp_path, "relay", target_model="dfp/fleet", hf_endpoint=hub.endpoint,
                          models_via="control_node")
    first = play_roles(tmp_path, inv, ["models"])
    assert first.exit_code == 0, [t["msg"] for t in first.tasks if t["status"] == "failed"]
    served = {name: hub.served("dfp/fleet", name) for name in FILES}
    assert served == {name: 1 for name in FILES}, served  # once for the whole fleet
    got = snapshots(first, hosts)
    assert len({r["models"]["target"]["commit"] for r in got.values()}) == 1
    assert all(r["bytes_sent"] == sum(map(len, FILES.values())) and r["changed"] for r in got.values())

    second = play_roles(tmp_path, inv, ["models"])
    assert second.exit_code == 0 and all(second.recap[h.name]["changed"] == 0 for h in hosts)
    assert all(r["bytes_sent"] == 0 for r in snapshots(second, hosts).values())
    assert {name: hub.served("dfp/fleet", name) for name in FILES} == served


def test_each_host_on_its_own_takes_every_file_itself(hub, ssh_hosts, inventory_file, tmp_path, clean_fleet):
    """The comparison: without the relay, the upstream serves each file once per host."""
    hosts = ssh_hosts[:3]
    hub.publish("dfp/fleet-direct", FILES)
    inv = fleet_inventory(inventory_file, hosts, tmp_path, "direct", target_model="dfp/fleet-direct", hf_endpoint=hub.endpoint)
    assert play_roles(tmp_path, inv, ["models"]).exit_code == 0
    assert {name: hub.served("dfp/fleet-direct", name) for name in FILES} == {name: 3 for name in FILES}


def test_the_air_gapped_push_sends_only_what_a_host_lacks(ssh_hosts, inventory_file, tmp_path, clean_fleet):
    hosts = ssh_hosts[:2]
    source = tmp_path / "models"
    repo = source / "dfp" / "airgap"
    repo.mkdir(parents=True)
    for name, data in FILES.items():
        (repo / name).write_bytes(data)
    (repo / "notes.bin").write_bytes(b"pickle")  # pickled: never pushed unless asked
    inv = fleet_inventory(inventory_file, hosts, tmp_path, "airgap", target_model="dfp/airgap", models_source_dir=str(source),
                          hf_endpoint="http://127.0.0.1:9")  # nothing listens there: the push needs no Hub
    first = play_roles(tmp_path, inv, ["models"])
    assert first.exit_code == 0, [t["msg"] for t in first.tasks if t["status"] == "failed"]
    got = snapshots(first, hosts)
    assert all(r["bytes_sent"] == sum(map(len, FILES.values())) for r in got.values())
    home = Path(os.path.expanduser(f"~{hosts[0].user}"))
    snap = Path(got[hosts[0].name]["target_path"].replace("~", str(home), 1))
    assert sorted(p.name for p in snap.iterdir()) == sorted(FILES)
    assert (snap / "model-00001-of-00002.safetensors").read_bytes() == FILES["model-00001-of-00002.safetensors"]

    second = play_roles(tmp_path, inv, ["models"])
    assert second.exit_code == 0 and all(r["bytes_sent"] == 0 for r in snapshots(second, hosts).values())
    assert all(second.recap[h.name]["changed"] == 0 for h in hosts)

    (repo / "config.json").write_bytes(b'{"architectures": ["Qwen3ForCausalLM"], "v": 2}')
    third = snapshots(play_roles(tmp_path, inv, ["models"]), hosts)
    assert all(r["bytes_sent"] == len((repo / "config.json").read_bytes()) for r in third.values())


def test_a_host_that_asks_for_another_file_gets_nothing():
    """The host's plan is data: a file outside the manifest (a path into the control node) is refused."""
    from engine.errors import TaskError
    from engine.run.actions.models import check_needed

    class Call:
        def where(self):
            return "models task"

    manifest = {"repo_id": "dfp/x", "commit": "a" * 40, "files": {"config.json": {"etag": "b" * 40, "size": 1}}}
    check_needed(Call(), manifest, "b" * 40, f"/h/hub/models--dfp--x/blobs/{'b' * 40}.incomplete")
    for etag, remote in [("../../../../etc/shadow", "/h/blobs/x.incomplete"), ("b" * 40, "/etc/cron.d/x"),
                         ("c" * 40, f"/h/blobs/{'c' * 40}.incomplete")]:
        with pytest.raises(TaskError, match="nothing was sent"):
            check_needed(Call(), manifest, etag, remote)
