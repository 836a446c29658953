"""drafter_config: a DFlash drafter config.json derived from the weights' header and the target's config."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "drafter_configs"


from make_checkpoint import drafter_tensors, drafter_tensors_for, write_sparse_safetensors  # noqa: E402

from dflash_host.models.config import hub_cache_snapshot, is_multimodal_target  # noqa: E402
from dflash_host.models.drafter_choices import (  # noqa: E402
    choose_block_size,
    choose_layer_ids,
    choose_mask_token_id,
    parse_layer_ids,
    reference_layer_ids,
)
from dflash_host.models.drafter_shape import infer_drafter_shape  # noqa: E402
from dflash_host.models.drafter_target import rope_theta_of, target_rope  # noqa: E402
from dflash_host.module import Context, ModuleError, execute  # noqa: E402
from library import drafter_config as dc  # noqa: E402

PUBLISHED = {
    "qwen3-4b-dflash-b16": "targets/qwen3-4b.json",
    "qwen3.5-122b-a10b-dflash": "targets/qwen3.5-122b-a10b.json",
    "qwen3.5-27b-dflash": "targets/qwen3.5-27b.json",
}
TINY_TARGET = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 8,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "vocab_size": 512,
    "max_position_embeddings": 512,
    "rms_norm_eps": 1e-06,
    "rope_theta": 1000000,
    "torch_dtype": "float32",
}
NP_DTYPES = {"F32": np.float32, "F16": np.float16}


def load(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


def save_real(path: Path, table: dict) -> None:
    """A real (small) safetensors file written by the safetensors library, zeros of each shape."""
    save_file(
        {name: np.zeros(shape, dtype=NP_DTYPES[dtype]) for name, (dtype, shape) in table.items()},
        str(path),
        metadata={"format": "pt"},
    )


def tiny_table(**over) -> dict:
    kw = dict(hidden=64, layers=1, heads=4, kv_heads=2, head_dim=32, intermediate=128, k=2, dtype="F32")
    kw.update(over)
    return drafter_tensors(**kw)


@pytest.fixture
def tiny(tmp_path):
    """A tiny real drafter (hidden 64, 1 layer, k=2) and an 8-layer tiny target, as folders."""
    drafter, target = tmp_path / "dflash", tmp_path / "target"
    drafter.mkdir()
    target.mkdir()
    save_real(drafter / "model.safetensors", tiny_table())
    (target / "config.json").write_text(json.dumps(TINY_TARGET))
    return drafter, target


def call(args: dict, check: bool = False, diff: bool = False) -> dict:
    """One module call as the worker makes it: validated args in, a result dict out."""
    return execute(dc.ARGS, dc.run, args, Context(check=check, diff=diff), "drafter_config")


# ----------------------------------------------------------------------------------------------
# Pure decisions, as tables


@pytest.mark.parametrize(
    "n,k,ids",
    [
        (64, 5, [1, 16, 31, 46, 61]),  # Qwen3.5/3.6-27B drafters
        (36, 5, [1, 9, 17, 25, 33]),  # Qwen3-4B drafter
        (48, 8, [1, 7, 14, 20, 26, 32, 39, 45]),  # Qwen3.5-122B-A10B drafter
        (8, 2, [1, 5]),
        (5, 2, [1, 2]),
        (64, 1, [32]),
        (2, 1, [1]),
    ],
)
def test_reference_layer_ids_reproduce_the_published_spacing(n, k, ids):
    assert reference_layer_ids(n, k) == ids


@pytest.mark.parametrize("n,k", [(2, 2), (4, 2), (7, 5)])
def test_reference_spacing_on_a_too_shallow_target_asks_for_explicit_ids(n, k):
    with pytest.raises(ModuleError) as err:
        reference_layer_ids(n, k)
    assert f"at least {k + 3} layers" in err.value.msg
    assert f"N={n}" in err.value.msg
    assert "give the ids explicitly" in err.value.msg and "drafter_target_layer_ids" in err.value.msg


@pytest.mark.parametrize(
    "config,expected",
    [
        ({}, False),
        (TINY_TARGET, False),
        ({"text_config": {"hidden_size": 8}}, True),
        ({"vision_config": {"depth": 2}, "hidden_size": 8}, True),
        ({"text_config": None}, False),
        (load("targets/qwen3-4b.json"), False),
        (load("targets/qwen3.5-27b.json"), True),
        (load("targets/qwen3.5-122b-a10b.json"), True),
    ],
)
def test_is_multimodal_target(config, expected):
    assert is_multimodal_target(config) is expected


@pytest.mark.parametrize(
    "value,expected",
    [
        (None, None),
        ([1, 16, 31], [1, 16, 31]),
        (["1", "16"], [1, 16]),
        (["1,16,31"], [1, 16, 31]),
        (["[1, 16, 31]"], [1, 16, 31]),
        (["None"], None),
        ([""], None),
    ],
)
def test_parse_layer_ids_accepts_the_forms_yaml_and_extra_vars_give(value, expected):
    assert parse_layer_ids(value) == expected


@pytest.mark.parametrize("value", [[], ["a"], [True], [1.5], ["[1, x]"]])
def test_parse_layer_ids_refuses_what_is_not_a_list_of_integers(value):
    with pytest.raises(ModuleError, match="target_layer_ids"):
        parse_layer_ids(value)


@pytest.mark.parametrize(
    "text,top,expected",
    [
        ({}, {"rope_theta": 1000000}, {"rope_theta": 1000000}),
        ({}, {"rope_theta": 1e6, "rope_scaling": None}, {"rope_theta": 1e6}),
        (
            {},
            {"rope_theta": 1e6, "rope_scaling": {"rope_type": "yarn", "factor": 4.0}},
            {"rope_theta": 1e6, "rope_scaling": {"rope_type": "yarn", "factor": 4.0}},
        ),
        (  # a multimodal target: M-RoPE and partial rotary stay with the target
            {
                "rope_parameters": {
                    "mrope_interleaved": True,
                    "mrope_section": [11, 11, 10],
                    "partial_rotary_factor": 0.25,
                    "rope_theta": 10000000,
                    "rope_type": "default",
                }
            },
            {},
            {"rope_parameters": {"rope_theta": 10000000, "rope_type": "default"}, "rope_theta": 10000000},
        ),
        (
            {},
            {"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 5e6}},
            {"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 5e6}, "rope_theta": 5e6},
        ),
        (
            {},
            {"rope_theta": 1e6, "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]}},
            {"rope_theta": 1e6},
        ),
        ({}, {}, {}),
    ],
)
def test_target_rope_gives_a_text_only_drafter_the_targets_rope(text, top, expected):
    assert target_rope(text, top) == expected


@pytest.mark.parametrize(
    "given,existing,expected",
    [
        ([3, 4], {"dflash_config": {"target_layer_ids": [1, 5]}}, ([3, 4], "given")),
        (None, {"dflash_config": {"target_layer_ids": [1, 5]}}, ([1, 5], "existing")),
        (None, {"target_layer_ids": [2, 6]}, ([2, 6], "existing")),
        (None, {}, ([1, 5], "reference")),
    ],
)
def test_choose_layer_ids_prefers_argument_then_existing_then_reference(given, existing, expected):
    assert choose_layer_ids(given, existing, 8, 2) == expected


@pytest.mark.parametrize(
    "given,existing,expected",
    [
        (7, {"dflash_config": {"mask_token_id": 3}}, (7, "given")),
        (None, {"dflash_config": {"mask_token_id": 3}}, (3, "existing")),
        (None, {"mask_token_id": 4}, (4, "existing")),
        (None, {}, (None, None)),
    ],
)
def test_choose_mask_token_id(given, existing, expected):
    assert choose_mask_token_id(given, existing) == expected


@pytest.mark.parametrize(
    "given,existing,expected",
    [
        (None, {}, (16, "default", ["top"])),
        (8, {}, (8, "given", ["top"])),
        (None, {"block_size": 10}, (10, "existing", ["top"])),
        (None, {"dflash_config": {"block_size": 12}}, (12, "existing", ["nested"])),
        (4, {"dflash_config": {"block_size": 12}}, (4, "given", ["nested"])),
        (None, {"block_size": 10, "dflash_config": {"block_size": 10}}, (10, "existing", ["top", "nested"])),
    ],
)
def test_choose_block_size_keeps_the_existing_layout(given, existing, expected):
    assert choose_block_size(given, existing) == expected


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_infer_drafter_shape_reads_the_published_numbers(name):
    published = load(f"{name}.json")
    table = {n: {"dtype": d, "shape": s} for n, (d, s) in drafter_tensors_for(published).items()}
    shape = infer_drafter_shape(table, "x")
    for key in ("hidden_size", "num_hidden_layers", "head_dim", "intermediate_size"):
        assert shape[key] == published[key], key
    assert shape["q_proj_rows"] == published["num_attention_heads"] * published["head_dim"]
    assert shape["fc_shape"] == [
        published["hidden_size"],
        published["hidden_size"] * len(published["dflash_config"]["target_layer_ids"]),
    ]
    assert shape["dtype"] == "bfloat16"
    assert not shape["has_own_embed_tokens"] and not shape["has_own_lm_head"]


def test_infer_drafter_shape_accepts_model_prefix_and_vllm_aliases():
    table = tiny_table(prefix="model.")
    table["encoder.fc.weight"] = table.pop("model.fc.weight")
    shape = infer_drafter_shape({n: {"dtype": d, "shape": s} for n, (d, s) in table.items()}, "x")
    assert (shape["hidden_size"], shape["num_hidden_layers"], shape["head_dim"]) == (64, 1, 32)


# ----------------------------------------------------------------------------------------------
# Published drafters: the config inferred from their shape matches what was published


def _published_case(tmp_path: Path, name: str) -> tuple[Path, dict, Path]:
    published = load(f"{name}.json")
    drafter = tmp_path / name
    drafter.mkdir()
    write_sparse_safetensors(str(drafter / "model.safetensors"), drafter_tensors_for(published), {"format": "pt"})
    return drafter, published, FIXTURES / PUBLISHED[name]


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_config_inferred_from_a_published_drafter_shape_matches_the_published_fields(tmp_path, name):
    drafter, published, target = _published_case(tmp_path, name)
    mask = published["dflash_config"]["mask_token_id"]
    res = call({"drafter": str(drafter), "target": str(target), "mask_token_id": mask})
    assert not res["failed"], res["msg"]
    cfg = json.loads((drafter / "config.json").read_text())
    assert cfg == res["config"]
    for key in (
        "architectures",
        "model_type",
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "intermediate_size",
        "vocab_size",
        "max_position_embeddings",
        "rms_norm_eps",
        "hidden_act",
        "attention_bias",
        "tie_word_embeddings",
        "num_target_layers",
        "dtype",
    ):
        assert cfg[key] == published[key], key
    # The reference spacing reproduces the published target_layer_ids from the target's depth.
    assert cfg["dflash_config"] == {
        "target_layer_ids": published["dflash_config"]["target_layer_ids"],
        "mask_token_id": mask,
    }
    assert res["layer_ids_rule"] == "reference"
    assert any("guessed by the reference spacing" in w for w in res["warnings"])
    published_block = published.get("block_size", published["dflash_config"].get("block_size"))
    assert cfg["block_size"] == published_block
    assert rope_theta_of(cfg) == rope_theta_of(published)
    if "rope_parameters" in cfg:
        assert cfg["rope_parameters"] == {"rope_theta": rope_theta_of(published), "rope_type": "default"}
    assert "layer_types" not in cfg
    assert cfg["target_hidden_size"] == published["hidden_size"]
    assert res["multimodal_target"] is is_multimodal_target(load(PUBLISHED[name]))
    assert res["inferred"]["num_fused_target_layers"] == len(published["dflash_config"]["target_layer_ids"])


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_a_published_config_keeps_its_layout_and_values_and_a_second_run_changes_nothing(tmp_path, name):
    drafter, published, target = _published_case(tmp_path, name)
    (drafter / "config.json").write_text(json.dumps(published, indent=2))
    args = {"drafter": str(drafter), "target": str(target)}

    first = call(args)
    assert not first["failed"], first["msg"]
    cfg = json.loads((drafter / "config.json").read_text())
    for key, value in published.items():
        assert cfg[key] == value, key
    assert set(cfg) - set(published) <= {"target_hidden_size", "num_target_layers"}
    assert ("block_size" in cfg) == ("block_size" in published)  # older top-level vs newer nested
    assert (first["layer_ids_rule"], first["mask_token_id_rule"]) == ("existing", "existing")
    assert not any("corrected" in w for w in first.get("warnings", []))
    assert first["backup"] and json.loads(Path(first["backup"]).read_text()) == published

    second = call(args)
    assert not second["failed"] and second["changed"] is False
    assert "is as wanted" in second["msg"]


# ----------------------------------------------------------------------------------------------
# The module's contract: idempotent, check mode, diff, backups, by hand


def test_second_run_reports_no_change_and_leaves_the_file_alone(tiny):
    drafter, target = tiny
    args = {"drafter": str(drafter), "target": str(target), "mask_token_id": 3}
    assert call(args)["changed"] is True
    before = os.stat(drafter / "config.json")
    again = call(args)
    assert again["changed"] is False and not again["failed"]
    after = os.stat(drafter / "config.json")
    assert (before.st_ino, before.st_mtime_ns) == (after.st_ino, after.st_mtime_ns)
    assert sorted(p.name for p in drafter.iterdir()) == ["config.json", "model.safetensors"]


def test_check_mode_writes_nothing_but_shows_the_diff(tiny):
    drafter, target = tiny
    res = call({"drafter": str(drafter), "target": str(target), "mask_token_id": 3}, check=True, diff=True)
    assert res["changed"] is True and res["msg"].startswith("would write")
    assert not (drafter / "config.json").exists()
    assert res["diff"]["before"] == "" and json.loads(res["diff"]["after"]) == res["config"]


def test_a_replaced_config_is_corrected_with_a_timestamped_backup(tiny):
    drafter, target = tiny
    wrong = {
        "architectures": ["Qwen3ForCausalLM"],
        "num_hidden_layers": 4,
        "dflash_config": {"mask_token_id": 3},
    }
    (drafter / "config.json").write_text(json.dumps(wrong))
    res = call({"drafter": str(drafter), "target": str(target)}, diff=True)
    assert res["changed"] and not res["failed"]
    assert res["config"]["num_hidden_layers"] == 1 and res["config"]["architectures"] == ["DFlashDraftModel"]
    assert any("corrected num_hidden_layers: the existing config said 4, now 1" in w for w in res["warnings"])
    backup = Path(res["backup"])
    assert backup.name.startswith("config.json.") and backup.name.endswith(".bak")
    assert json.loads(backup.read_text()) == wrong
    assert json.loads(res["diff"]["before"]) == wrong


def test_run_by_hand_prints_the_json_result_with_the_config(tiny, tmp_path):
    drafter, target = tiny
    args = tmp_path / "args.json"
    args.write_text(json.dumps({"drafter": str(drafter), "target": str(target / "config.json"), "mask_token_id": 3}))
    cmd = [sys.executable, "-m", "library.drafter_config", str(args)]
    checked = subprocess.run(cmd + ["--check"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stderr
    assert json.loads(checked.stdout)["changed"] is True and not (drafter / "config.json").exists()
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["config"] == json.loads((drafter / "config.json").read_text())
    assert result["config"]["dflash_config"] == {"target_layer_ids": [1, 5], "mask_token_id": 3}
    assert result["layer_ids_rule"] == "reference"
    assert result["inferred"]["hidden_size"] == 64 and result["inferred"]["dtype"] == "float32"
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert json.loads(again.stdout)["changed"] is False


def test_target_may_be_a_folder_or_its_config_json(tiny):
    drafter, target = tiny
    a = call({"drafter": str(drafter), "target": str(target), "mask_token_id": 3}, check=True)
    b = call({"drafter": str(drafter), "target": str(target / "config.json"), "mask_token_id": 3}, check=True)
    assert a["config"] == b["config"] and a["target"]["config"] == str(target / "config.json")


def test_a_sharded_drafter_is_read_through_its_index(tiny):
    drafter, target = tiny
    (drafter / "model.safetensors").unlink()
    table = tiny_table()
    names = sorted(table)
    half = len(names) // 2
    shards = {
        "model-00001-of-00002.safetensors": names[:half],
        "model-00002-of-00002.safetensors": names[half:],
    }
    for shard, members in shards.items():
        save_real(drafter / shard, {n: table[n] for n in members})
    weight_map = {n: shard for shard, members in shards.items() for n in members}
    (drafter / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    res = call({"drafter": str(drafter), "target": str(target), "mask_token_id": 3})
    assert not res["failed"], res["msg"]
    assert len(res["files"]) == 2 and res["inferred"]["fc_shape"] == [64, 128]


def test_given_ids_win_and_are_written(tiny):
    drafter, target = tiny
    (drafter / "config.json").write_text(json.dumps({"dflash_config": {"target_layer_ids": [1, 5], "mask_token_id": 3}}))
    res = call({"drafter": str(drafter), "target": str(target), "target_layer_ids": [0, 7]})
    assert res["layer_ids_rule"] == "given" and res["config"]["dflash_config"]["target_layer_ids"] == [0, 7]
    assert not any("guessed" in w for w in res.get("warnings", []))


def test_a_block_size_argument_goes_where_the_existing_config_keeps_it(tiny):
    drafter, target = tiny
    (drafter / "config.json").write_text(json.dumps({"dflash_config": {"mask_token_id": 3, "block_size": 16}}))
    res = call({"drafter": str(drafter), "target": str(target), "block_size": 8})
    assert res["config"]["dflash_config"]["block_size"] == 8 and "block_size" not in res["config"]


def test_a_new_config_never_gets_layer_types_but_an_existing_one_keeps_them(tiny):
    drafter, target = tiny
    res = call({"drafter": str(drafter), "target": str(target), "mask_token_id": 3})
    assert "layer_types" not in res["config"]
    existing = dict(res["config"], layer_types=["sliding_attention"], sliding_window=64)
    (drafter / "config.json").write_text(json.dumps(existing))
    res = call({"drafter": str(drafter), "target": str(target)})
    assert res["changed"] is False and res["config"]["layer_types"] == ["sliding_attention"]


def test_writing_elsewhere_takes_known_values_from_the_drafters_own_config(tiny, tmp_path):
    drafter, target = tiny
    own = {"dflash_config": {"mask_token_id": 3, "target_layer_ids": [2, 6]}, "block_size": 8}
    (drafter / "config.json").write_text(json.dumps(own))
    dest = tmp_path / "out" / "config.json"
    dest.parent.mkdir()
    res = call({"drafter": str(drafter), "target": str(target), "dest": str(dest)})
    assert not res["failed"], res["msg"]
    assert json.loads(dest.read_text())["dflash_config"] == {"mask_token_id": 3, "target_layer_ids": [2, 6]}
    assert json.loads((drafter / "config.json").read_text()) == own


def test_a_symlinked_config_is_replaced_by_a_file_and_its_blob_is_untouched(tiny, tmp_path):
    drafter, target = tiny  # as in a Hugging Face cache snapshot
    blob = tmp_path / "blob"
    blob.write_text(json.dumps({"dflash_config": {"mask_token_id": 3}}))
    (drafter / "config.json").symlink_to(blob)
    res = call({"drafter": str(drafter), "target": str(target)})
    assert res["changed"] and not (drafter / "config.json").is_symlink()
    assert json.loads(blob.read_text()) == {"dflash_config": {"mask_token_id": 3}}


def test_a_drafter_with_its_own_embeddings_is_reported(tiny):
    drafter, target = tiny
    save_real(drafter / "model.safetensors", tiny_table(embed_vocab=512, lm_head_vocab=512))
    res = call({"drafter": str(drafter), "target": str(target), "mask_token_id": 3})
    assert res["inferred"]["has_own_embed_tokens"] and res["inferred"]["has_own_lm_head"]
    assert res["config"]["tie_word_embeddings"] is False


# ----------------------------------------------------------------------------------------------
# Refusals: both numbers named, nothing written


def _refused(drafter: Path, res: dict, *phrases: str) -> None:
    assert res["failed"] and res["changed"] is False
    for phrase in phrases:
        assert phrase in res["msg"], (phrase, res["msg"])
    assert sorted(p.name for p in drafter.iterdir()) == ["config.json", "model.safetensors"]


EXISTING = {
    "architectures": ["DFlashDraftModel"],
    "note": "hand written",
    "dflash_config": {"mask_token_id": 3},
}


@pytest.mark.parametrize(
    "table,target_over,args,phrases",
    [
        (
            tiny_table(hidden=32, heads=2, head_dim=16),
            {},
            {},
            ["the drafter's hidden size is 32", "hidden_size 64", "model.safetensors"],
        ),
        (
            dict(tiny_table(), **{"fc.weight": ("F32", [64, 100])}),
            {},
            {},
            ["width 100 is not a multiple of the hidden size 64"],
        ),
        (
            tiny_table(),
            {},
            {"target_layer_ids": [1, 3, 5]},
            ["k=2 fused target layers", "name 3 ([1, 3, 5])", "give exactly 2 ids"],
        ),
        (
            tiny_table(),
            {},
            {"target_layer_ids": [1, 8]},
            ["id(s) [8] outside 0..7", "has 8 layers", "config.json"],
        ),
        (tiny_table(lm_head_vocab=500), {}, {}, ["own lm_head has 500 rows", "vocab_size 512"]),
        (tiny_table(embed_vocab=600), {}, {}, ["own embed_tokens has 600 rows", "vocab_size 512"]),
        (
            tiny_table(),
            {},
            {"mask_token_id": 512},
            ["mask_token_id 512 (given) is outside the target's vocabulary 0..511"],
        ),
        (
            tiny_table(),
            {"num_hidden_layers": 4},
            {},
            ["needs a target of at least 5 layers", "give the ids explicitly"],
        ),
        (tiny_table(), {}, {"block_size": 1}, ["block_size 1 (given) must be at least 2"]),
    ],
    ids=[
        "hidden",
        "fc-width",
        "k-vs-ids",
        "id-outside",
        "lm-head-vocab",
        "embed-vocab",
        "mask-vocab",
        "shallow",
        "block",
    ],
)
def test_a_drafter_that_does_not_fit_the_target_is_refused_naming_both_numbers(tmp_path, table, target_over, args, phrases):
    drafter, target = tmp_path / "d", tmp_path / "t"
    drafter.mkdir()
    target.mkdir()
    save_real(drafter / "model.safetensors", table)
    (drafter / "config.json").write_text(json.dumps(EXISTING))
    (target / "config.json").write_text(json.dumps(dict(TINY_TARGET, **target_over)))
    res = call(dict({"drafter": str(drafter), "target": str(target)}, **args))
    _refused(drafter, res, *phrases)
    assert json.loads((drafter / "config.json").read_text()) == EXISTING


def test_heads_times_head_dim_must_match_q_proj_rows(tmp_path):
    drafter, target = tmp_path / "d", tmp_path / "t"
    drafter.mkdir()
    target.mkdir()
    save_real(drafter / "model.safetensors", tiny_table(norms=False))
    existing = dict(EXISTING, head_dim=32, num_attention_heads=3)
    (drafter / "config.json").write_text(json.dumps(existing))
    (target / "config.json").write_text(json.dumps(TINY_TARGET))
    res = call({"drafter": str(drafter), "target": str(target)})
    _refused(drafter, res, "num_attention_heads 3 x head_dim 32 = 96", "q_proj", "has 128 rows")
    assert json.loads((drafter / "config.json").read_text()) == existing


def test_without_q_norm_head_dim_comes_from_the_existing_config(tmp_path):
    drafter, target = tmp_path / "d", tmp_path / "t"
    drafter.mkdir()
    target.mkdir()
    save_real(drafter / "model.safetensors", tiny_table(norms=False))
    (drafter / "config.json").write_text(json.dumps(dict(EXISTING, head_dim=32)))
    (target / "config.json").write_text(json.dumps(TINY_TARGET))
    res = call({"drafter": str(drafter), "target": str(target)})
    assert not res["failed"], res["msg"]
    assert (res["config"]["num_attention_heads"], res["config"]["num_key_value_heads"]) == (4, 2)


def test_a_missing_mask_token_id_says_what_it_is_and_where_it_comes_from(tiny):
    drafter, target = tiny
    res = call({"drafter": str(drafter), "target": str(target)})
    assert res["failed"]
    for phrase in (
        "mask_token_id is needed",
        "model card",
        "drafter_mask_token_id",
        str(drafter / "config.json"),
    ):
        assert phrase in res["msg"]
    assert not (drafter / "config.json").exists()


def _bad_not_safetensors(d: Path, t: Path) -> None:
    (d / "model.safetensors").write_bytes(b"<html>rate limited</html>\n")


def _bad_truncated_header(d: Path, t: Path) -> None:
    raw = (d / "model.safetensors").read_bytes()
    (d / "model.safetensors").write_bytes(raw[:40])


def _bad_length_larger_than_file(d: Path, t: Path) -> None:
    (d / "model.safetensors").write_bytes((10**9).to_bytes(8, "little") + b"{}")


def _bad_invalid_json(d: Path, t: Path) -> None:
    (d / "model.safetensors").write_bytes((6).to_bytes(8, "little") + b"{oops}")


def _bad_no_fc(d: Path, t: Path) -> None:
    table = tiny_table()
    del table["fc.weight"]
    save_real(d / "model.safetensors", table)


def _bad_missing_shard(d: Path, t: Path) -> None:
    (d / "model.safetensors").rename(d / "model-00001-of-00002.safetensors")
    weight_map = {
        "fc.weight": "model-00001-of-00002.safetensors",
        "norm.weight": "model-00002-of-00002.safetensors",
    }
    (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))


def _bad_target_without_layers(d: Path, t: Path) -> None:
    cfg = load("targets/qwen3.5-27b.json")
    del cfg["text_config"]["num_hidden_layers"]
    (t / "config.json").write_text(json.dumps(cfg))


def _bad_target_without_hidden(d: Path, t: Path) -> None:
    cfg = dict(TINY_TARGET)
    del cfg["hidden_size"]
    (t / "config.json").write_text(json.dumps(cfg))


def _bad_target_not_json(d: Path, t: Path) -> None:
    (t / "config.json").write_text("{'hidden_size': 64}")


def _bad_target_missing(d: Path, t: Path) -> None:
    (t / "config.json").unlink()


def _bad_existing_config_not_json(d: Path, t: Path) -> None:
    (d / "config.json").write_text('{"dflash_config": ')


def _bad_existing_layer_types(d: Path, t: Path) -> None:
    (d / "config.json").write_text(json.dumps(dict(EXISTING, layer_types=["full_attention"] * 3)))


BAD_INPUTS = [
    (_bad_not_safetensors, "model.safetensors", "not a safetensors file"),
    (_bad_truncated_header, "model.safetensors", "truncated safetensors header"),
    (_bad_length_larger_than_file, "model.safetensors", "larger than the whole file"),
    (_bad_invalid_json, "model.safetensors", "header is not valid JSON"),
    (_bad_no_fc, "model.safetensors", "no fc.weight tensor, so this is not a DFlash drafter"),
    (_bad_missing_shard, "model.safetensors.index.json", "model-00002-of-00002.safetensors"),
    (
        _bad_target_without_layers,
        "t/config.json",
        "no usable num_hidden_layers (missing; looked at the top level and under text_config)",
    ),
    (_bad_target_without_hidden, "t/config.json", "no usable hidden_size"),
    (_bad_target_not_json, "t/config.json", "the target config is not valid JSON"),
    (_bad_target_missing, "t/config.json", "no such file"),
    (_bad_existing_config_not_json, "d/config.json", "the existing drafter config is not valid JSON"),
    (_bad_existing_layer_types, "d/config.json", "layer_types lists 3 entries but the weights hold 1 layers"),
]


@pytest.mark.parametrize("spoil,where,phrase", BAD_INPUTS, ids=[b[0].__name__[5:] for b in BAD_INPUTS])
def test_bad_input_is_a_clear_error_naming_the_file_and_the_config_stays_untouched(tmp_path, spoil, where, phrase):
    drafter, target = tmp_path / "d", tmp_path / "t"
    drafter.mkdir()
    target.mkdir()
    save_real(drafter / "model.safetensors", tiny_table())
    (drafter / "config.json").write_text(json.dumps(EXISTING))
    (target / "config.json").write_text(json.dumps(TINY_TARGET))
    spoil(drafter, target)
    before = {p.name: p.read_bytes() for p in drafter.iterdir()}
    res = call({"drafter": str(drafter), "target": str(target)})
    assert res["failed"] and res["changed"] is False
    assert phrase in res["msg"], res["msg"]
    assert where in res["msg"], res["msg"]
    assert "Traceback" not in res["msg"]
    assert {p.name: p.read_bytes() for p in drafter.iterdir()} == before


def test_reading_a_published_size_checkpoint_reads_only_its_header(tmp_path):
    drafter, published, target = _published_case(tmp_path, "qwen3.5-27b-dflash")
    res = call({"drafter": str(drafter), "target": str(target), "mask_token_id": 248070}, check=True)
    size = (drafter / "model.safetensors").stat().st_size
    assert size > 3_000_000_000
    assert res["header_bytes_read"] < 10_000
    assert res["header_read_ms"] < 50


# ----------------------------------------------------------------------------------------------
# Locations: Hub ids through the host's Hugging Face cache, dest as a folder


def _hub_cache(root: Path, repo_id: str, revision: str = "abc123", refs: bool = True) -> Path:
    repo = root / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / revision
    snapshot.mkdir(parents=True)
    if refs:
        (repo / "refs").mkdir()
        (repo / "refs" / "main").write_text(revision + "\n")
    return snapshot


def test_hub_cache_snapshot_follows_refs_main_else_the_newest_snapshot(tmp_path):
    env = {"HF_HUB_CACHE": str(tmp_path)}
    pinned = _hub_cache(tmp_path, "z-lab/Qwen3-4B-DFlash-b16", "rev1")
    _hub_cache(tmp_path, "Qwen/Qwen3-4B", "old", refs=False)
    newest = tmp_path / "models--Qwen--Qwen3-4B" / "snapshots" / "new"
    newest.mkdir()
    os.utime(newest.parent / "old", (1, 1))
    assert hub_cache_snapshot("z-lab/Qwen3-4B-DFlash-b16", env) == str(pinned)
    assert hub_cache_snapshot("Qwen/Qwen3-4B", env) == str(newest)
    assert hub_cache_snapshot("Qwen/Absent", env) is None
    assert hub_cache_snapshot("not a hub id", env) is None
    assert hub_cache_snapshot("Qwen/Qwen3-4B", {"HF_HOME": str(tmp_path / "nothing")}) is None


def test_hub_ids_are_resolved_in_the_hosts_hugging_face_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    drafter = _hub_cache(tmp_path / "hub", "z-lab/tiny-DFlash")
    target = _hub_cache(tmp_path / "hub", "Qwen/tiny")
    save_real(drafter / "model.safetensors", tiny_table())
    (target / "config.json").write_text(json.dumps(TINY_TARGET))
    res = call({"drafter": "z-lab/tiny-DFlash", "target": "Qwen/tiny", "mask_token_id": 3})
    assert not res["failed"], res["msg"]
    assert res["path"] == str(drafter / "config.json") and res["target"]["config"] == str(target / "config.json")


def test_a_hub_id_missing_from_the_cache_says_to_download_it(tmp_path, monkeypatch, tiny):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    drafter, _ = tiny
    res = call({"drafter": str(drafter), "target": "Qwen/Qwen3-8B", "mask_token_id": 3})
    assert res["failed"] and "looks like a Hub id, but it is not in this host's Hugging Face cache" in res["msg"]
    assert "target_model" in res["msg"]


def test_dest_may_name_a_folder(tiny, tmp_path):
    drafter, target = tiny
    out = tmp_path / "out"
    out.mkdir()
    res = call({"drafter": str(drafter), "target": str(target), "dest": str(out), "mask_token_id": 3})
    assert res["path"] == str(out / "config.json") and (out / "config.json").is_file()


def test_a_missing_dest_folder_is_refused(tiny, tmp_path):
    drafter, target = tiny
    res = call(
        {
            "drafter": str(drafter),
            "target": str(target),
            "dest": str(tmp_path / "no" / "c.json"),
            "mask_token_id": 3,
        }
    )
    assert res["failed"] and "its folder does not exist" in res["msg"]


def test_given_values_that_replace_existing_ones_are_reported(tiny):
    drafter, target = tiny
    (drafter / "config.json").write_text(json.dumps({"dflash_config": {"target_layer_ids": [1, 5], "mask_token_id": 3}}))
    res = call({"drafter": str(drafter), "target": str(target), "target_layer_ids": [2, 6], "mask_token_id": 4})
    assert "replaced dflash_config.target_layer_ids: the existing config said [1, 5], now [2, 6]" in res["warnings"]
    assert "replaced dflash_config.mask_token_id: the existing config said 3, now 4" in res["warnings"]


def test_an_existing_config_with_null_rope_fields_gets_the_targets_rope(tiny):
    drafter, target = tiny
    (drafter / "config.json").write_text(json.dumps(dict(EXISTING, rope_scaling=None, rope_theta=None)))
    res = call({"drafter": str(drafter), "target": str(target)})
    assert res["config"]["rope_theta"] == 1000000 and res["config"]["rope_scaling"] is None
    assert not any("rope_theta" in w for w in res.get("warnings", []))


def test_a_target_without_vocab_size_takes_it_from_the_drafters_own_embeddings(tmp_path):
    drafter, target = tmp_path / "d", tmp_path / "t"
    drafter.mkdir()
    target.mkdir()
    save_real(drafter / "model.safetensors", tiny_table(embed_vocab=300))
    (target / "config.json").write_text(json.dumps({k: v for k, v in TINY_TARGET.items() if k != "vocab_size"}))
    res = call({"drafter": str(drafter), "target": str(target), "mask_token_id": 3})
    assert res["config"]["vocab_size"] == 300


def test_a_target_without_vocab_size_and_a_drafter_without_embeddings_is_refused(tiny):
    drafter, target = tiny
    (target / "config.json").write_text(json.dumps({k: v for k, v in TINY_TARGET.items() if k != "vocab_size"}))
    res = call({"drafter": str(drafter), "target": str(target), "mask_token_id": 3})
    assert res["failed"] and "the target config has no vocab_size" in res["msg"]
    assert str(target / "config.json") in res["msg"] and not (drafter / "config.json").exists()


def test_ids_that_do_not_increase_are_written_with_a_warning(tiny):
    drafter, target = tiny
    res = call({"drafter": str(drafter), "target": str(target), "mask_token_id": 3, "target_layer_ids": [5, 1]})
    assert not res["failed"] and any("not strictly increasing" in w for w in res["warnings"])
