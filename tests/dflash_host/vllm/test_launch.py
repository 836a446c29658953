"""dflash_host.vllm.launch, records and systemd_unit: the rendered argv, environment file and systemd unit; bad input named by its variable."""

from __future__ import annotations

import json
import shlex

import pytest

from dflash_host.module import ModuleError
from dflash_host.vllm import launch
from dflash_host.vllm.launch import masked_env
from dflash_host.vllm.records import parse_env_file, render_env_file
from dflash_host.vllm.render import fingerprint
from dflash_host.vllm.systemd_unit import choose_mode, render_unit
from dflash_host.vllm.values import check_extra_args
from library.vllm_server import ARGS


def resolve(args, is_multimodal=None):
    """resolve with the module's flag table (vllm_server's ARGS), as the module calls it."""
    return launch.resolve(args, is_multimodal, ARGS)


@pytest.fixture
def models(tmp_path):
    target, drafter = tmp_path / "target", tmp_path / "dflash"
    target.mkdir()
    drafter.mkdir()
    (target / "config.json").write_text(json.dumps({"architectures": ["Qwen3ForCausalLM"], "num_hidden_layers": 8}))
    (drafter / "config.json").write_text(json.dumps({"architectures": ["DFlashDraftModel"]}))
    return target, drafter


def base(models, **over):
    target, drafter = models
    args = {
        "venv_python": "/env/bin/python",
        "target_model": str(target),
        "drafter_model": str(drafter),
        "served_model_name": "target",
        "host": "127.0.0.1",
        "port": 8011,
        "flavor": "cuda",
        "num_speculative_tokens": 3,
        "speculative_method": "dflash",
    }
    args.update(over)
    return args


def test_argv_has_the_speculative_config_json_and_no_secret(models):
    spec = resolve(base(models, api_key="sk-secret", hf_token="hf_abc"))
    argv = spec["argv"]
    assert argv[:5] == ["/env/bin/python", "-m", "vllm.entrypoints.cli.main", "serve", str(models[0])]
    cfg = json.loads(argv[argv.index("--speculative-config") + 1])
    assert cfg == {"method": "dflash", "model": str(models[1]), "num_speculative_tokens": 3}
    assert "sk-secret" not in " ".join(argv) and "hf_abc" not in " ".join(argv)
    # both models are on the host: the server never downloads, so it does not get the Hugging Face token
    assert spec["env"]["VLLM_API_KEY"] == "sk-secret" and "HF_TOKEN" not in spec["env"]
    assert masked_env(spec["env"])["VLLM_API_KEY"] == "********"
    assert spec["expected_architectures"] == ["Qwen3ForCausalLM", "DFlashDraftModel"]


def test_cpu_flavor_implies_float32_eager_short_context_and_cpu_env(models):
    spec = resolve(base(models, flavor="cpu"))
    argv = spec["argv"]
    assert argv[argv.index("--dtype") + 1] == "float32"
    assert argv[argv.index("--max-model-len") + 1] == "512"
    assert "--enforce-eager" in argv
    assert spec["env"]["VLLM_CPU_KVCACHE_SPACE"] == "1" and spec["env"]["VLLM_HOST_IP"] == "127.0.0.1"
    assert spec["env"]["HF_HUB_OFFLINE"] == "1"  # every model is local


def test_optional_flags_and_draft_attention_backend(models):
    spec = resolve(
        base(
            models,
            draft_attention_backend="flash_attn",
            gpu_memory_utilization=0.85,
            tensor_parallel_size=2,
            max_num_batched_tokens=8192,
            env={"VLLM_USE_V2_MODEL_RUNNER": 1},
            extra_args=["--max-num-seqs", "8", "--enable-prefix-caching"],
        )
    )
    argv = spec["argv"]
    assert json.loads(argv[argv.index("--speculative-config") + 1])["attention_backend"] == "flash_attn"
    assert argv[argv.index("--gpu-memory-utilization") + 1] == "0.85"
    assert argv[argv.index("--tensor-parallel-size") + 1] == "2"
    assert argv[-3:] == ["--max-num-seqs", "8", "--enable-prefix-caching"]
    assert spec["env"]["VLLM_USE_V2_MODEL_RUNNER"] == "1"


def test_multimodal_target_gets_language_model_only(models):
    target, _ = models
    (target / "config.json").write_text(
        json.dumps({"architectures": ["Qwen3_5ForConditionalGeneration"], "text_config": {"num_hidden_layers": 64}})
    )
    from dflash_host.models.config import is_multimodal_target

    assert "--language-model-only" in resolve(base(models), is_multimodal_target)["argv"]
    assert "--language-model-only" not in resolve(base(models, language_model_only=False), is_multimodal_target)["argv"]


def test_without_drafter_there_is_no_speculative_config(models):
    spec = resolve(base(models, drafter_model=None, num_speculative_tokens=None))
    assert "--speculative-config" not in spec["argv"] and spec["expected_architectures"] == ["Qwen3ForCausalLM"]


def test_hub_id_target_is_not_checked_for_a_local_config(models):
    spec = resolve(base(models, target_model="Qwen/Qwen3-8B", drafter_model=None))
    assert spec["argv"][4] == "Qwen/Qwen3-8B" and "HF_HUB_OFFLINE" not in spec["env"]


@pytest.mark.parametrize(
    "over, variable",
    [
        ({"drafter_model": "/nonexistent/dflash"}, "drafter_model"),
        ({"num_speculative_tokens": None}, "num_speculative_tokens"),
        ({"num_speculative_tokens": 0}, "num_speculative_tokens"),
        ({"num_speculative_tokens": "three"}, "num_speculative_tokens"),
        ({"port": 0}, "vllm_port"),
        ({"port": 70000}, "vllm_port"),
        ({"port": "http"}, "vllm_port"),
        ({"target_model": "/nonexistent/target"}, "target_model"),
        ({"extra_args": ["max-num-seqs", "8"]}, "vllm_extra_args[0]"),
        ({"extra_args": ["-tp", "2"]}, "vllm_extra_args[0]"),
        ({"extra_args": ["--port", "9"]}, "vllm_port"),
        ({"extra_args": ["--api-key", "x"]}, "vllm_api_key"),
        ({"extra_args": ["--api_key", "x"]}, "vllm_api_key"),  # vLLM's parser reads _ as -
        ({"extra_args": ["--api-k", "x"]}, "vllm_api_key"),  # argparse takes an unambiguous prefix
        ({"extra_args": ["--api=x"]}, "vllm_api_key"),
        ({"extra_args": ["--served_model_name", "x"]}, "served_model_name"),
        ({"extra_args": ["--max-num-seqs", "8", "9"]}, "vllm_extra_args[2]"),
        ({"env": {"BAD-NAME": "1"}}, "vllm_env"),
        ({"env": {"X": "a\nb"}}, "vllm_env.X"),
        ({"dtype": "fp7"}, "dtype"),
        ({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization"),
        ({"flavor": "rocm"}, "vllm_flavor"),
        ({"api_key": "a", "api_key_file": "/x"}, "vllm_api_key"),
        ({"api_key_file": "/nonexistent/key"}, "vllm_api_key_file"),
    ],
)
def test_bad_input_names_the_variable(models, over, variable):
    with pytest.raises(ModuleError) as exc:
        resolve(base(models, **over))
    assert variable in exc.value.msg


def test_model_folder_without_config_json_is_refused(models):
    target, drafter = models
    (drafter / "config.json").unlink()
    with pytest.raises(ModuleError, match="drafter_model .* has no config.json.*drafter-config"):
        resolve(base(models))


@pytest.mark.parametrize(
    "extra",
    [
        [],
        ["--max-num-seqs", "8"],
        ["--max-num-seqs=8"],
        ["--kv-cache-dtype", "fp8", "--enable-prefix-caching"],
        ["--override-generation-config", '{"temperature": 0}'],
        ["--seed", "-1"],
    ],
)
def test_extra_args_that_are_well_formed_pass(extra):
    assert check_extra_args(extra) == extra


def test_env_file_round_trips_quotes_dollars_and_backslashes():
    env = {"A": 'he said "hi"', "B": "$HOME and `x`", "C": "back\\slash", "D": ""}
    text = render_env_file(env)
    assert parse_env_file(text) == env


def test_unit_exec_start_quotes_every_word_and_escapes_systemd_specials():
    argv = [
        "/env/bin/python",
        "-m",
        "vllm.entrypoints.cli.main",
        "serve",
        "/m/target",
        "--speculative-config",
        '{"method":"dflash","model":"/m/d 100%","num_speculative_tokens":3}',
    ]
    unit = render_unit(argv, "/run/vllm.env", "/logs/vllm.log", "abc123", "vLLM", "/run", user="svc")
    exec_line = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
    # undo systemd's own escapes ($$ -> $, %% -> %), then split like systemd does (C-style quotes)
    words = shlex.split(exec_line[len("ExecStart=") :].replace("$$", "$").replace("%%", "%"))
    assert words[0] == "/bin/bash" and words[3:5] == ["/logs/vllm.log", "abc123"] and words[5:] == argv
    assert 'printf "%s\\n" "=== dflash-provision: vLLM server start pid=$$ launch=$1"' in words[2]
    for line in (
        "Restart=on-failure",
        "KillMode=control-group",
        "EnvironmentFile=/run/vllm.env",
        "User=svc",
        "StandardOutput=journal",
    ):
        assert line in unit.splitlines()


@pytest.mark.parametrize(
    "use, present, root, mode",
    [
        ("auto", True, True, "systemd"),
        ("auto", True, False, "process"),
        ("auto", False, True, "process"),
        (False, True, True, "process"),
        ("false", True, True, "process"),
        (True, True, False, "systemd"),
        ("true", True, True, "systemd"),
    ],
)
def test_choose_mode_table(use, present, root, mode):
    assert choose_mode(use, present, root) == mode


def test_systemd_forced_without_systemd_is_an_error():
    with pytest.raises(ModuleError, match="vllm_use_systemd"):
        choose_mode(True, False, True)


def test_fingerprint_changes_with_argv_env_and_model_files_only():
    models = {"target": {"files": {"config.json": [10, 1]}}}
    fp = fingerprint(["a"], "X=1\n", models, "process", None)
    assert fp == fingerprint(["a"], "X=1\n", models, "process", None)
    assert fp != fingerprint(["b"], "X=1\n", models, "process", None)
    assert fp != fingerprint(["a"], "X=2\n", models, "process", None)
    assert fp != fingerprint(["a"], "X=1\n", {"target": {"files": {"config.json": [10, 2]}}}, "process", None)


# --------------------------------------------------------------------------- the flag table (vllm_server's ARGS)


def test_max_num_seqs_from_the_command_line_reaches_vllms_argv(models):
    """`-e max_num_seqs=8` arrives as text; the table's entry alone puts --max-num-seqs 8 on vLLM's command line."""
    argv = resolve(base(models, max_num_seqs="8"))["argv"]
    assert argv[argv.index("--max-num-seqs") + 1] == "8"
    assert "--max-num-seqs" not in resolve(base(models))["argv"]
    with pytest.raises(ModuleError, match="max_num_seqs is 0; it must be a whole number of at least 1"):
        resolve(base(models, max_num_seqs=0))


def test_the_launch_keeps_its_checked_values_and_the_parts_its_argv_is_composed_of(models):
    """What later steps need (vllm.variant: the GPUs a server uses, its memory share) is kept as checked values,
    also where vllm_extra_args set the flag, so nothing reads them back out of argv."""
    spec = resolve(base(models, tensor_parallel_size="2", gpu_memory_utilization="0.8"))
    assert spec["values"]["tensor_parallel_size"] == 2 and spec["values"]["gpu_memory_utilization"] == 0.8
    spec = resolve(base(models, extra_args=["--tensor-parallel-size", "4", "--gpu-memory-utilization=0.5", "--enforce-eager"]))
    assert spec["values"]["tensor_parallel_size"] == 4 and spec["values"]["gpu_memory_utilization"] == 0.5
    assert spec["values"]["enforce_eager"] is True
    assert launch.compose_argv(spec["argv_parts"], spec["host"], spec["port"], spec["speculative"]) == spec["argv"]


def test_a_table_flag_in_extra_args_is_refused_only_when_the_launch_sets_it(models):
    assert resolve(base(models, extra_args=["--max-num-seqs", "4"]))["argv"][-2:] == ["--max-num-seqs", "4"]
    with pytest.raises(ModuleError, match=r"vllm_extra_args\[0\] is --max-num-seqs, .* use the variable max_num_seqs"):
        resolve(base(models, max_num_seqs=8, extra_args=["--max-num-seqs=4"]))
    with pytest.raises(ModuleError, match="use the variable max_model_len"):  # the cpu flavor sets it
        resolve(base(models, flavor="cpu", extra_args=["--max-model-len", "4096"]))


SAMPLE = {"count": 7, "index": 1, "port": 29500, "fraction": 0.5, "switch": True, "text": "10.0.0.1"}
# What a cluster flag needs beside it to be valid both with and without it (the settings are checked as a group).
COMPANIONS = {
    "nnodes": {"master_addr": "10.0.0.1", "tensor_parallel_size": 7},
    "node_rank": {"nnodes": 2, "master_addr": "10.0.0.1", "tensor_parallel_size": 2},
    "headless": {"nnodes": 2, "node_rank": 1, "master_addr": "10.0.0.1", "tensor_parallel_size": 2},
}


@pytest.mark.parametrize("name", [n for n, e in ARGS.items() if e.get("flag")])
def test_every_flag_entry_of_the_table_reaches_argv_and_the_fingerprint(models, name):
    entry = ARGS[name]
    value = SAMPLE.get(entry["kind"]) or entry.get("one_of", [None])[0]
    spec = resolve(base(models, **COMPANIONS.get(name, {}), **{name: value}))
    assert entry["flag"] in spec["argv"], spec["argv"]
    without = resolve(base(models, **COMPANIONS.get(name, {}), **{name: False if entry["kind"] == "switch" else None}))
    assert entry["flag"] not in without["argv"]
    assert fingerprint(spec["argv"], "", {}, "process", None) != fingerprint(without["argv"], "", {}, "process", None)
    assert entry.get("help") and entry.get("var")  # documented once, set by its variable


# --------------------------------------------------------------------------- one node of a multi-node vLLM


def cluster(models, rank, **over):
    """A node of a 2-node TP=2 cluster whose head is 10.0.0.1:29510."""
    args = dict(nnodes=2, node_rank=rank, master_addr="10.0.0.1", master_port=29510, tensor_parallel_size=2,
                headless=rank > 0, node_address=f"10.0.0.{rank + 1}")
    args.update(over)
    return resolve(base(models, flavor="cpu", **args))


def after(argv, flag):
    return argv[argv.index(flag) + 1]


def test_a_single_host_launch_is_unchanged_by_the_cluster_settings(models):
    spec = resolve(base(models))
    assert spec["cluster"] is None and "--nnodes" not in spec["argv"] and "--headless" not in spec["argv"]
    assert spec["argv"][5:11] == ["--served-model-name", "target", "--host", "127.0.0.1", "--port", "8011"]


def test_head_and_worker_run_the_same_serve_with_their_rank_and_only_the_head_listens(models):
    head, worker = cluster(models, 0), cluster(models, 1)
    for spec, rank in ((head, "0"), (worker, "1")):
        argv = spec["argv"]
        assert after(argv, "--nnodes") == "2" and after(argv, "--node-rank") == rank
        assert after(argv, "--master-addr") == "10.0.0.1" and after(argv, "--master-port") == "29510"
        assert after(argv, "--tensor-parallel-size") == "2"
    assert "--port" in head["argv"] and "--headless" not in head["argv"]
    assert "--headless" in worker["argv"] and "--port" not in worker["argv"] and "--host" not in worker["argv"]
    assert worker["port"] is None  # no API: vllm_port is not read
    assert head["env"]["VLLM_HOST_IP"] == "10.0.0.1" and worker["env"]["VLLM_HOST_IP"] == "10.0.0.2"
    assert head["cluster"]["role"] == "head" and worker["cluster"]["role"] == "worker"
    assert worker["cluster"]["local_world_size"] == 1 and worker["cluster"]["world_size"] == 2
    # the same command line but for the rank and the API
    strip = {"--node-rank", "0", "1", "--headless", "--host", "127.0.0.1", "--port", "8011"}
    assert [w for w in head["argv"] if w not in strip] == [w for w in worker["argv"] if w not in strip]


def test_rank_zero_and_pipeline_parallel_are_written(models):
    spec = cluster(models, 0, tensor_parallel_size=1, pipeline_parallel_size=2)
    assert after(spec["argv"], "--node-rank") == "0" and after(spec["argv"], "--pipeline-parallel-size") == "2"
    with pytest.raises(ModuleError, match="use the variable cluster_node_rank"):  # rank 0 is set, so it is taken
        cluster(models, 0, extra_args=["--node-rank", "0"])


@pytest.mark.parametrize(
    "rank, over, words",
    [
        (1, {"master_addr": None}, ["cluster_nnodes is 2", "set cluster_master_addr"]),
        (2, {}, ["cluster_node_rank is 2", "cluster_nnodes is 2", "from 0 (the head) to 1"]),
        (0, {"headless": True}, ["cluster_headless is true on cluster_node_rank 0", "cluster_headless: false"]),
        (1, {"nnodes": 2, "tensor_parallel_size": 3}, ["tensor_parallel_size (3) x pipeline_parallel_size (1) = 3",
                                                       "cluster_nnodes (2)"]),
        (1, {"node_address": None}, ["VLLM_HOST_IP=127.0.0.1", "Set cluster_node_address"]),
        (1, {"master_port": 70000}, ["cluster_master_port is 70000", "65535"]),
        (1, {"node_rank": -1, "headless": False}, ["cluster_node_rank is -1", "at least 0"]),
        (1, {"master_addr": "--evil"}, ["cluster_master_addr is '--evil'", "starts with '-'"]),
        (1, {"master_addr": "10.0.0.1\nExecStartPre=/bin/x"}, ["cluster_master_addr contains a newline"]),
        (1, {"node_address": "10.0.0.2\n"}, ["cluster_node_address contains a newline"]),
        (1, {"env": {"VLLM_HOST_IP": "10.9.9.9"}}, ["vllm_env sets VLLM_HOST_IP", "keep one of them"]),
    ],
)
def test_cluster_settings_are_checked_as_a_group_naming_the_variable(models, rank, over, words):
    with pytest.raises(ModuleError) as exc:
        cluster(models, rank, **over)
    for word in words:
        assert word in exc.value.msg
    assert "\n" not in exc.value.msg  # one paragraph


def test_a_cluster_on_one_machine_may_keep_loopback_addresses(models):
    spec = cluster(models, 1, master_addr="127.0.0.2", node_address=None)
    assert spec["env"]["VLLM_HOST_IP"] == "127.0.0.1" and spec["cluster"]["master_addr"] == "127.0.0.2"


def test_the_cluster_settings_reach_the_fingerprint(models):
    a, b = cluster(models, 1), cluster(models, 1, master_port=29511)
    assert fingerprint(a["argv"], render_env_file(a["env"]), {}, "process", None) != fingerprint(
        b["argv"], render_env_file(b["env"]), {}, "process", None)
    c = cluster(models, 1, node_address="10.0.0.3")
    assert a["argv"] == c["argv"] and render_env_file(a["env"]) != render_env_file(c["env"])



def test_the_hf_token_reaches_only_a_server_that_may_download(models, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-hf"))
    spec = resolve(base(models, target_model="org/not-on-this-host", drafter_model=None, hf_token="hf_abc"))
    assert spec["env"]["HF_TOKEN"] == "hf_abc" and "HF_HUB_OFFLINE" not in spec["env"]
    assert spec["argv"][4] == "org/not-on-this-host"


def test_a_schedule_goes_into_the_speculative_config_and_so_into_the_fingerprint(models):
    bands = [[1, 4, 3], [5, 1024, 2]]
    spec = resolve(base(models, speculative_schedule=bands))
    argv = spec["argv"]
    cfg = json.loads(argv[argv.index("--speculative-config") + 1])
    assert cfg["num_speculative_tokens_per_batch_size"] == bands and cfg["num_speculative_tokens"] == 3
    plain = resolve(base(models))
    assert fingerprint(spec["argv"], "", {}, "process", None) != fingerprint(plain["argv"], "", {}, "process", None)


@pytest.mark.parametrize("bands, why", [
    ([[2, 8, 3]], "from batch size 1 upwards"),
    ([[1, 8, 3], [8, 16, 2]], "right after the last one"),
    ([[1, 8, 4]], "outside 0..num_speculative_tokens"),
    ([[1, 8]], "not [first, last, k]"),
    ("1-8:3", "not a list"),
])
def test_a_bad_schedule_is_refused_naming_the_band(models, bands, why):
    with pytest.raises(ModuleError, match="speculative_schedule"):
        resolve(base(models, speculative_schedule=bands))
    with pytest.raises(ModuleError) as err:
        resolve(base(models, speculative_schedule=bands))
    assert why in err.value.msg


def fake_vllm(tmp_path, dynamic: bool):
    """A vLLM source tree on PYTHONPATH (the probe reads its files, imports none of them)."""
    root = tmp_path / ("new" if dynamic else "old") / "vllm"
    (root / "config").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    field = "    num_speculative_tokens_per_batch_size: list | None = None\n" if dynamic else ""
    (root / "config" / "speculative.py").write_text("class SpeculativeConfig:\n" + field + "    method: str = ''\n")
    return str(root.parent)


def test_a_vllm_without_the_schedule_serves_one_k_and_says_why(tmp_path, models):
    import sys

    from dflash_host.module import Context
    from dflash_host.vllm.features import schedule_where_supported

    args = dict(base(models, speculative_schedule=[[1, 4, 3], [5, 1024, 2]]), venv_python=sys.executable)
    ctx = Context()
    old = schedule_where_supported(dict(args, env={"PYTHONPATH": fake_vllm(tmp_path, False)}), ctx)
    assert old["speculative_schedule"] is None and "serving one k, num_speculative_tokens=3" in ctx.warnings[0]
    new = schedule_where_supported(dict(args, env={"PYTHONPATH": fake_vllm(tmp_path, True)}), Context())
    assert new["speculative_schedule"] == [[1, 4, 3], [5, 1024, 2]]
