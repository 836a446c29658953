"""The measurement server's launch, the host's speed record, the tune's plan and the host_vars edit (real files)."""

from __future__ import annotations

import json

import pytest

from dflash_host.module import Context, ModuleError
from dflash_host.speed.state import last_speed
from dflash_host.vllm.launch import compose_argv
from dflash_host.vllm.variant import check_variant, drafter_max_k, read_configured_record, variant_argv, variant_places
from dfp_cli import speed_commands as SC
from engine.errors import UserError
from library import speed_record, vllm_variant

SPEC = {"method": "dflash", "model": "/m/d", "num_speculative_tokens": 3}
ARGV = ["/py", "-m", "vllm.entrypoints.cli.main", "serve", "/m/t", "--served-model-name", "t", "--host", "127.0.0.1",
        "--port", "8000", "--speculative-config", json.dumps(SPEC, separators=(",", ":")), "--dtype", "float32"]
# The configured launch record as vllm_server writes it: the argv's parts and the checked values beside the argv.
CONFIGURED = {"argv": ARGV, "argv_parts": {"head": ARGV[:7], "tail": ARGV[-2:]}, "host": "127.0.0.1", "port": 8000,
              "speculative": SPEC, "values": {"dtype": "float32"}}


def test_the_configured_argv_is_composed_from_the_records_parts():
    assert compose_argv(CONFIGURED["argv_parts"], "127.0.0.1", 8000, SPEC) == ARGV


def test_a_record_without_parts_or_values_asks_for_provision():
    with pytest.raises(ModuleError, match="run provision again"):
        variant_argv({"argv": ARGV, "speculative": SPEC}, 8010, None)


def test_the_baseline_drops_the_speculative_config_and_moves_the_port():
    argv = variant_argv(CONFIGURED, 8010, None)
    assert "--speculative-config" not in argv and argv[argv.index("--port") + 1] == "8010"
    assert argv[-2:] == ["--dtype", "float32"] and len(argv) == len(ARGV) - 2


def test_a_k_variant_rewrites_only_num_speculative_tokens():
    argv = variant_argv(CONFIGURED, 8010, 1)
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    assert spec == {**SPEC, "num_speculative_tokens": 1}


def test_k_outside_the_drafters_block_is_refused():
    with pytest.raises(ModuleError, match="outside 1..3"):
        check_variant(4, SPEC, 3)
    with pytest.raises(ModuleError, match="serves none"):
        check_variant(2, None, None)
    assert check_variant("baseline", SPEC, 3) is None and check_variant("2", SPEC, 3) == 2


def test_the_drafters_block_size_bounds_k(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"block_size": 4}))
    assert drafter_max_k({"model": str(tmp_path)}) == 3
    (tmp_path / "config.json").write_text(json.dumps({"dflash_config": {"block_size": 16}}))
    assert drafter_max_k({"model": str(tmp_path)}) == 15


def test_a_foreign_record_of_a_stopped_server_is_left_alone(tmp_path):
    p = variant_places(str(tmp_path / "run" / "vllm.pid"), str(tmp_path / "logs" / "vllm.log"))
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "vllm-speed.configured.json").write_text('{"someone": "else"}')
    with pytest.raises(ModuleError, match="not the tool's record"):
        read_configured_record(p)
    assert (tmp_path / "run" / "vllm-speed.configured.json").read_text() == '{"someone": "else"}'


def test_without_a_rendered_launch_the_measurement_server_says_what_to_run(tmp_path):
    args = {"state": "started", "variant": "baseline", "pidfile": str(tmp_path / "run" / "vllm.pid"),
            "log": str(tmp_path / "logs" / "vllm.log"), "root": str(tmp_path), "port_offset": 10, "placement": "auto",
            "nvidia_smi": None, "restore": True}
    with pytest.raises(ModuleError, match="invoke provision"):
        vllm_variant.run(args, Context())


def launch_of(fingerprint: str) -> dict:
    """A launch record of the tool's shape (the fields read_launch proves it by) with this fingerprint."""
    return {"fingerprint": fingerprint, "launch_id": fingerprint, "argv": ["vllm"], "env_file": "vllm.env",
            "mode": "process", "speculative": SPEC}


def _gate_args(tmp_path, **kw):
    args = {name: spec.get("default") for name, spec in speed_record.ARGS.items()}
    args.update(pidfile=str(tmp_path / "run" / "vllm.pid"), root=str(tmp_path), host_label="h1")
    args.update(kw)
    return args


def run_(c, tps, acc=None, samples=None):
    return {"concurrency": c, "output_tokens_per_s": tps, "acceptance_rate": acc, "per_position_acceptance": [],
            "samples_tokens_per_s": samples or [tps]}


def test_a_foreign_state_file_or_textfile_is_never_overwritten(tmp_path):
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "speed.json").write_text('{"mine": true}')
    with pytest.raises(ModuleError, match="not the tool's record of speed figures"):
        speed_record.run(_gate_args(tmp_path, runs=[run_(1, 10.0)]), Context())
    (tmp_path / "state" / "speed.json").unlink()
    (tmp_path / "metrics").mkdir()
    (tmp_path / "metrics" / "dflash.prom").write_text("node_load1 3\n")
    with pytest.raises(ModuleError, match="not written by dflash-provision"):
        speed_record.run(_gate_args(tmp_path, runs=[run_(1, 10.0)]), Context())
    assert (tmp_path / "metrics" / "dflash.prom").read_text() == "node_load1 3\n"


def test_the_gate_caches_per_launch_and_fails_naming_both_throughputs(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "vllm.launch.json").write_text(json.dumps(launch_of("f1")))
    args = _gate_args(tmp_path, action="gate", mode="fail", concurrency=1, interleaved=True,
                      runs=[run_(1, 333.0, 0.002, [330.0, 333.0, 336.0])],
                      baseline_runs=[run_(1, 539.0, None, [535.0, 539.0, 543.0])])
    with pytest.raises(ModuleError, match=r"SLOWER.*95 % interval.*333.0 tokens/s with the drafter \(k=3\), 539.0 without it"):
        speed_record.run(args, Context())
    plan = speed_record.run(_gate_args(tmp_path, action="lookup", mode="fail", concurrency=1), Context())
    assert plan["hit"] and not plan["measure"] and abs(plan["cached"]["speedup"] - 333 / 539) < 0.002
    assert plan["cached"]["high"] < 1.0 and plan["cached"]["pairs"] == 3
    warn = Context()
    speed_record.run(_gate_args(tmp_path, action="gate", mode="warn", concurrency=1), warn)  # from the cache
    assert "SLOWER" in warn.warnings[0]
    (tmp_path / "run" / "vllm.launch.json").write_text(json.dumps(launch_of("f2")))
    assert speed_record.run(_gate_args(tmp_path, action="lookup", mode="fail", concurrency=1), Context())["measure"]
    # status shows the gate's figure: the interval's centre, not another rounding of another ratio
    assert last_speed(str(tmp_path / "state" / "speed.json"))["speedup"] == {"1": plan["cached"]["speedup"]}


def test_tune_steps_and_choice_on_the_host(tmp_path):
    step = _gate_args(tmp_path, action="tune_step", concurrency=1)
    speed_record.run({**step, "variant": "baseline", "runs": [run_(1, 500.0)]}, Context())
    speed_record.run({**step, "variant": 1, "runs": [run_(1, 700.0, 0.9)]}, Context())
    speed_record.run({**step, "variant": 3, "runs": [run_(1, 900.0, 0.8)]}, Context())
    out = speed_record.run(_gate_args(tmp_path, action="tune_choose", concurrency=1), Context())
    assert out["choice"]["chosen_k"] == 3 and set(out["by_k"]) == {"1", "3"}
    prom = (tmp_path / "metrics" / "dflash.prom").read_text()
    assert 'dflash_num_speculative_tokens{host="h1"} 3' in prom and 'dflash_speedup{concurrency="1",host="h1"} 1.8' in prom


def test_tune_plan_skips_k_above_the_block_and_after_a_position_that_cannot_pay():
    plan = SC.TunePlan([7, 1, 2, 3, 5])
    plan.after_baseline("h", {"tune_server": {"max_k": 5}})
    assert plan.skipped["h"] == ["k=7: above block_size - 1 = 5"]
    assert plan.next_step() == {"h": 1}
    plan.after_k("h", 1, {"tune_bench": {"runs": [{"concurrency": 4, "per_position_acceptance": [0.5]}]}}, 4)
    assert plan.next_step() == {"h": 2}
    plan.after_k("h", 2, {"tune_bench": {"runs": [{"concurrency": 4, "per_position_acceptance": [0.3, 0.01]}]}}, 4)
    assert plan.next_step() == {} and "k=3,5: cannot pay" in plan.skipped["h"][1]


def test_host_vars_keep_their_other_lines_and_show_a_diff(tmp_path):
    path = tmp_path / "host_vars" / "gpu1.yaml"
    path.parent.mkdir()
    path.write_text("# notes\nnum_speculative_tokens: 15  # old\nmax_num_seqs: 8\n")
    diff = SC.set_host_var(path, "num_speculative_tokens", 7)
    assert path.read_text() == "# notes\nnum_speculative_tokens: 7\nmax_num_seqs: 8\n"
    assert "-num_speculative_tokens: 15  # old" in diff and "+num_speculative_tokens: 7" in diff
    assert SC.set_host_var(path, "num_speculative_tokens", 7) == ""
    assert SC.host_vars_file(str(tmp_path / "inventory.yaml"), "gpu1") == path
    path.write_text("$ANSIBLE_VAULT;1.1;AES256\n3031\n")
    with pytest.raises(UserError, match="vault-encrypted"):
        SC.set_host_var(path, "num_speculative_tokens", 7)


def test_no_paying_k_is_said_loudly_and_nothing_is_written(tmp_path):
    tuned = {"choice": {"chosen_k": None, "recommendation": "no k beats serving without the drafter",
                        "baseline_tokens_per_s": 7022.8, "concurrency": 16}, "measured": ["baseline", 1]}
    msg = SC.apply_choice("gpu1", tuned, str(tmp_path / "inventory.yaml"), write=True)
    assert "NO k MAKES THE DRAFTER PAY" in msg and "drafter_model: null" in msg
    assert not (tmp_path / "host_vars").exists()


def test_tune_measures_each_level_given_and_chooses_its_one_k_at_tune_concurrency_or_the_largest():
    from dfp_cli.speed_commands import tune_vars

    assert tune_vars({"concurrency": "2", "requests": "8"}) == {"tune_levels": [2], "tune_concurrency": 2, "speed_requests": 8}
    assert tune_vars({"concurrency": "16,1"}) == {"tune_levels": [1, 16], "tune_concurrency": 16}
    assert tune_vars({"concurrency": "1,16", "extra_vars": ["tune_concurrency=1"]})["tune_concurrency"] == 1


def test_a_failed_tune_or_an_unmeasured_k_writes_nothing(tmp_path):
    inv = str(tmp_path / "inventory.yaml")
    good = {"choice": {"chosen_k": 3, "baseline_tokens_per_s": 500.0, "concurrency": 16}, "measured": ["baseline", 3]}
    assert "TUNE FAILED" in SC.apply_choice("gpu1", dict(good, failed="baseline failed"), inv, write=True)
    odd = dict(good, choice=dict(good["choice"], chosen_k="{{ other_var }}"))
    assert "not a k this tune measured" in SC.apply_choice("gpu1", odd, inv, write=True)
    assert not (tmp_path / "host_vars").exists()
    assert "num_speculative_tokens 3" in SC.apply_choice("gpu1", good, inv, write=True)


def test_host_vars_rewrite_keeps_the_mode_and_refuses_links_and_multiline_values(tmp_path):
    folder = tmp_path / "host_vars"
    folder.mkdir()
    secret = folder / "h.yaml"
    secret.write_text("vllm_api_key: s3cret\n")
    secret.chmod(0o600)
    SC.set_host_var(secret, "num_speculative_tokens", 3)
    assert oct(secret.stat().st_mode & 0o777) == "0o600" and "s3cret" in secret.read_text()
    link = folder / "l.yaml"
    link.symlink_to(secret)
    for path, text in ((link, None), (folder / "m.yaml", "num_speculative_tokens:\n  5\n"),
                       (folder / "d.yaml", "a: 1\n...\n"), (folder / "v.yaml", "tok: !vault |\n  $ANSIBLE_VAULT;1.1\n")):
        if text is not None:
            path.write_text(text)
        before = path.read_text()
        with pytest.raises(UserError):
            SC.set_host_var(path, "num_speculative_tokens", 7)
        assert path.read_text() == before
    assert link.is_symlink()


@pytest.mark.parametrize("text", [
    "{vllm_port: 8011, num_speculative_tokens: 3}\n",          # a flow mapping
    "num_speculative_tokens: &k 3\nother: *k\n",               # an anchor others refer to
    "- a\n- b\n",                                              # not a mapping
])
def test_a_layout_a_line_edit_would_break_is_refused_and_left_as_it_was(tmp_path, text):
    path = tmp_path / "h.yaml"
    path.write_text(text)
    with pytest.raises(UserError, match="by hand"):
        SC.set_host_var(path, "num_speculative_tokens", 5)
    assert path.read_text() == text


@pytest.mark.parametrize("text", ["base: &k 3\nnum_speculative_tokens: *k\n", "num_speculative_tokens: !!str 3\n"])
def test_an_alias_or_tag_on_the_edited_line_alone_is_simply_replaced(tmp_path, text):
    import yaml

    path = tmp_path / "h.yaml"
    path.write_text(text)
    SC.set_host_var(path, "num_speculative_tokens", 5)
    assert yaml.safe_load(path.read_text())["num_speculative_tokens"] == 5


def test_an_edit_loads_to_the_same_data_plus_the_change(tmp_path):
    import yaml

    path = tmp_path / "h.yaml"
    path.write_text("# notes\nbase: &b {a: 1}\nuse: *b\nnum_speculative_tokens: 3   # old\n")
    before = yaml.safe_load(path.read_text())
    SC.set_host_var(path, "num_speculative_tokens", 5)
    assert yaml.safe_load(path.read_text()) == {**before, "num_speculative_tokens": 5}


def tune_two_levels(tmp_path, dynamic_k: bool) -> dict:
    """A tune at concurrency 1 and 16 recorded on the host: k=5 pays best at 1 request in flight, k=2 at 16
    (no interval overlaps another); the choice."""
    step = _gate_args(tmp_path, action="tune_step", concurrency=16)
    base = [run_(1, 100.0, None, [99.0, 100.0, 101.0]), run_(16, 1000.0, None, [990.0, 1000.0, 1010.0])]
    speed_record.run({**step, "variant": "baseline", "runs": base, "dynamic_k": dynamic_k}, Context())
    speed_record.run({**step, "variant": 2, "runs": [run_(1, 150.0, 0.9, [149.0, 150.0, 151.0]),
                                                      run_(16, 1400.0, 0.9, [1395.0, 1400.0, 1405.0])]}, Context())
    speed_record.run({**step, "variant": 5, "runs": [run_(1, 250.0, 0.8, [249.0, 250.0, 251.0]),
                                                      run_(16, 900.0, 0.8, [895.0, 900.0, 905.0])]}, Context())
    return speed_record.run(_gate_args(tmp_path, action="tune_choose", concurrency=16), Context())


def test_tune_at_two_levels_writes_a_schedule_where_vllm_takes_one(tmp_path):
    out = tune_two_levels(tmp_path, dynamic_k=True)
    choice = out["choice"]
    assert choice["chosen_k"] == 2 and choice["per_level"]["1"]["chosen_k"] == 5
    assert choice["schedule"] == [[1, 4, 5], [5, 1024, 2]]
    tuned = {"choice": choice, "measured": ["baseline", 2, 5], "failed": None}
    inv = tmp_path / "inventory.yaml"
    inv.write_text("all: {hosts: {h1: {}}}\n")
    message = SC.apply_choice("h1", tuned, str(inv), write=True)
    text = (tmp_path / "host_vars" / "h1.yaml").read_text()
    assert text == "num_speculative_tokens: 5\nspeculative_schedule: [[1, 4, 5], [5, 1024, 2]]\n", message


def test_tune_at_two_levels_on_a_vllm_without_schedules_serves_one_k_and_says_why(tmp_path):
    out = tune_two_levels(tmp_path, dynamic_k=False)
    assert "schedule" not in out["choice"] and "no num_speculative_tokens_per_batch_size" in out["choice"]["schedule_note"]
    assert out["choice"]["chosen_k"] == 2
