"""`invoke monitoring` end to end on a local host: the engine runs playbooks/monitoring.yaml against real files (a
speed record written by the speed_record module, a launch record), and the written files carry what they said:
the served model's commits, the per-load verdict, the inventory's floors. Bad input is one paragraph, exit 4."""

from __future__ import annotations

import json

import pytest
import yaml
from invoke import Exit

from dflash_host.module import Context
from dfp_cli.monitoring.command import monitoring
from library import speed_record
from tests.monitoring.helpers import COMMIT_T, needs_promtool, promtool

OPTS = {"host": None, "group": "gpu", "limit": None, "extra_vars": None, "vault_password_file": None}


def run_(c: int, samples: list) -> dict:
    return {"concurrency": c, "output_tokens_per_s": sorted(samples)[1], "samples_tokens_per_s": samples,
            "acceptance_rate": 0.5, "per_position_acceptance": [0.7, 0.5, 0.3], "mean_acceptance_length": 2.5}


def write_record(root) -> None:
    """Measured in turns: the drafter pays at concurrency 1 (1.5x) and is slower at 16 (0.6x)."""
    args = {name: spec.get("default") for name, spec in speed_record.ARGS.items()}
    args.update(pidfile=str(root / "run" / "vllm.pid"), root=str(root), action="record", interleaved=True,
                runs=[run_(1, [150.0, 151.0, 152.0]), run_(16, [60.0, 61.0, 62.0])], num_speculative_tokens=3,
                baseline_runs=[run_(1, [100.0, 100.0, 100.0]), run_(16, [100.0, 101.0, 102.0])])
    speed_record.run(args, Context())


def write_launch(root) -> None:
    (root / "run").mkdir(exist_ok=True)
    target = f"{root}/hf/hub/models--org--target/snapshots/{COMMIT_T}"
    (root / "run" / "vllm.launch.json").write_text(json.dumps(
        {"host": "127.0.0.1", "port": 8011, "served_model_name": "tiny-target", "mode": "pidfile",
         "models": {"target": {"path": target}, "drafter": {"path": f"{root}/models/tiny-dflash"}}}))


@pytest.fixture
def inventory(tmp_path, inventory_file):
    root = tmp_path / "host"
    root.mkdir()
    write_record(root)
    write_launch(root)
    return inventory_file(local=True, groups={"gpu": ["local"]}, host_vars={"local": {
        "dfp_root": str(root), "vllm_port": 8011, "served_model_name": "tiny-target", "min_acceptance_rate": 0.4,
        "ttft_p99_max_s": 2.5}})


@needs_promtool
def test_it_writes_what_the_host_and_the_inventory_know(tmp_path, inventory, capsys):
    out = tmp_path / "prom"
    monitoring(None, **OPTS, inventory=[str(inventory)], out=str(out))
    said = capsys.readouterr().out
    assert "local: vLLM 127.0.0.1:8011" in said and "drafter not paying at: c=16 slower" in said, said
    [group] = yaml.safe_load((out / "targets" / "vllm.yml").read_text())
    assert group == {"targets": ["127.0.0.1:8011"], "labels": {"host": "local", "group": "gpu",
                                                               "served_model": "tiny-target", "target_commit": COMMIT_T}}
    rules = yaml.safe_load((out / "rules" / "dflash.rules.yml").read_text())
    constants = {(r["record"], r["labels"].get("concurrency")): r["expr"] for r in rules["groups"][0]["rules"]}
    assert constants[("dflash:min_acceptance_rate", None)] == "vector(0.4)"
    assert constants[("dflash:min_mean_acceptance_length", None)] == "vector(2.2)"  # 1 + 0.4 x k=3
    assert constants[("dflash:ttft_p99_max_seconds", None)] == "vector(2.5)"
    assert constants[("dflash:drafter_losing_load_low", "16")] == "vector(4.0)"
    checked = promtool("check", "config", str(out / "prometheus.yml"))
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_without_out_with_a_bad_setting_or_an_unwritable_out_it_says_so(tmp_path, inventory, capsys):
    with pytest.raises(Exit) as exc:
        monitoring(None, **OPTS, inventory=[str(inventory)], out=None)
    assert exc.value.code == 4 and "--out DIR is required" in capsys.readouterr().err
    out = tmp_path / "prom"
    with pytest.raises(Exit) as exc:
        monitoring(None, **{**OPTS, "extra_vars": ["monitoring_window=ten minutes"]}, inventory=[str(inventory)],
                   out=str(out))
    err = capsys.readouterr().err
    assert exc.value.code == 4 and "monitoring_window is 'ten minutes'; give a Prometheus duration" in err, err
    assert "Traceback" not in err and not out.exists()
    with pytest.raises(Exit) as exc:
        monitoring(None, **OPTS, inventory=[str(inventory)], out=str(inventory / "x"))  # a file, not a folder
    err = capsys.readouterr().err
    assert exc.value.code == 4 and "cannot write" in err and "Traceback" not in err, err
