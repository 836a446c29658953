"""Section "models" of the benchmark: a model repository onto 8 real sshd hosts, and its no-change re-check.

The upstream is a real HF-compatible server (olah, offline mode, over a local git repository) on
loopback, holding a 1 GiB repository (128 MiB with --quick) of random safetensors shards. Measured:
  direct: every host fetches from the upstream itself (models_via: host);
  relay:  the control node fetches each file once and sends each host what it lacks (models_via: control_node);
for each, the wall time and the bytes the upstream served (olah's access log, counted per file); then the
no-change re-check of the whole repository on one host (stat only) and with models_verify=full (hashing).
All hosts share this machine's disk and cores, so the wall times say more about the relay's cost than
about a real LAN; the upstream's bytes are the figure that carries over.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

from bench.timing import log

HOSTS = 8
PLAYBOOK = "- name: models\n  hosts: all\n  gather_facts: false\n  pre_tasks: [{import_role: {name: common, tasks_from: variables}}]\n  roles: [models]\n"
REPO = "bench/big"


def make_repo(hub, total: int) -> dict:
    """Two shards of random bytes and a config; name -> size."""
    half = total // 2
    files = {"config.json": json.dumps({"architectures": ["Qwen3ForCausalLM"]}).encode(),
             "model-00001-of-00002.safetensors": os.urandom(half), "model-00002-of-00002.safetensors": os.urandom(total - half)}
    os.environ["GIT_CONFIG_PARAMETERS"] = "'core.compression=0' 'core.loosecompression=0'"  # random bytes do not compress
    try:
        hub.publish(REPO, files)
    finally:
        os.environ.pop("GIT_CONFIG_PARAMETERS", None)
    return {name: len(data) for name, data in files.items()}


def upstream_bytes(hub, sizes: dict, before: dict) -> int:
    return sum((hub.served(REPO, name) - before.get(name, 0)) * size for name, size in sizes.items())


def one_run(bench, hub, sizes: dict, tag: str, hosts: list, **more) -> dict:
    from engine.api import run_playbook
    from tests.sshd_harness import write_inventory

    inv = bench.tmp / f"models-{tag}.yaml"
    write_inventory(inv, hosts, vars={"target_model": REPO, "drafter_model": None, "hf_endpoint": hub.endpoint,
                                      "models_relay_cache": str(bench.tmp / "relay"), **more},
                    host_vars={h.name: {"dfp_root": f"~/dfp-bench/models-{tag}/{h.name}"} for h in hosts})
    book = bench.tmp / "models.yaml"
    book.write_text(PLAYBOOK)
    before = {name: hub.served(REPO, name) for name in sizes}
    started = time.perf_counter()
    res = run_playbook(str(book), inventory=str(inv))
    wall = time.perf_counter() - started
    if res.exit_code != 0:
        raise RuntimeError(f"models {tag}: the run failed: {[t['msg'] for t in res.tasks if t['status'] == 'failed'][:2]}")
    return {"wall_s": round(wall, 2), "upstream_bytes": upstream_bytes(hub, sizes, before), "hosts": len(hosts)}


def section_models(bench) -> None:
    from tests.fakes.hub import LocalHub

    if bench.pool is None:
        bench.start_pool()
    hosts = bench.hosts(HOSTS)
    total = (128 if bench.quick else 1024) * 2**20
    hub = LocalHub(bench.tmp / "hub").start()
    try:
        log(f"models: publishing a {total >> 20} MiB repository on olah")
        sizes = make_repo(hub, total)
        log(f"models: {len(hosts)} hosts, each fetching itself")
        direct = one_run(bench, hub, sizes, "direct", hosts)
        shutil.rmtree(Path(bench.home) / "dfp-bench" / "models-direct", ignore_errors=True)
        log(f"models: {len(hosts)} hosts through the control node")
        relay = one_run(bench, hub, sizes, "relay", hosts, models_via="control_node")
        log("models: the no-change re-check on one host, then models_verify=full")
        recheck = one_run(bench, hub, sizes, "relay", hosts[:1], models_via="control_node")
        full = one_run(bench, hub, sizes, "relay", hosts[:1], models_via="control_node", models_verify="full")
    finally:
        hub.stop()
        shutil.rmtree(Path(bench.home) / "dfp-bench", ignore_errors=True)
    bench.details["models"] = {"repo_bytes": total, "direct": direct, "relay": relay, "recheck": recheck, "full_verify": full}
    bench.keys["models_relay_upstream_ratio"] = round(relay["upstream_bytes"] / max(direct["upstream_bytes"], 1), 3)
    bench.keys["models_relay_wall_ratio"] = round(relay["wall_s"] / max(direct["wall_s"], 1e-6), 3)
    bench.keys["models_recheck_s"] = recheck["wall_s"]
