"""Ensure a DFlash drafter has a config.json that vLLM accepts, derived from facts on disk.

Drafters are often published or trained without a usable config.json, or with fields that silently
ruin acceptance (wrong target_layer_ids, a wrong layer count). This module reads only the
safetensors header of the drafter (never the weights) and the target's config.json, infers the
shape, chooses target_layer_ids and mask_token_id, validates everything against the target, and
writes the config atomically, keeping a timestamped backup of the one it replaces.

Helpers (dflash_host.models): config finds the models (a folder or a Hub id in the host's Hugging Face
cache), safetensors_header reads the header, drafter_shape infers the drafter's shape, drafter_target checks it
against the target's config, drafter_choices picks the ids, mask token and block size.
"""

from __future__ import annotations

import json
import os
import time

from dflash_host.host.files import atomic_write
from dflash_host.models.config import ModelLocation, config_json_path, locate_model, read_config_json, require_local
from dflash_host.models.drafter_choices import (
    DEFAULT_BLOCK_SIZE,
    RULE_TEXT,
    check_block_size,
    check_mask_token_id,
    choose_block_size,
    choose_layer_ids,
    choose_mask_token_id,
    parse_layer_ids,
    validate_layer_ids,
)
from dflash_host.models.drafter_shape import infer_drafter_shape, resolve_heads
from dflash_host.models.drafter_target import fused_layer_count, resolve_vocab, rope_theta_of, target_facts, validate_vocab
from dflash_host.models.hub_cache import is_verified_file
from dflash_host.models.safetensors_header import read_checkpoint
from dflash_host.module import Context, ModuleError, main

ARGS = {
    "drafter": {
        "type": "path",
        "required": True,
        "var": "drafter_model",
        "help": "the drafter checkpoint: its folder, a .safetensors file, its model.safetensors.index.json, or a "
        "Hub id found in the host's Hugging Face cache",
    },
    "target": {
        "type": "path",
        "required": True,
        "var": "target_model",
        "help": "the target model: its folder holding config.json, the config.json itself, or a Hub id found in "
        "the host's Hugging Face cache",
    },
    "hf_home": {"include": "hf_home"},
    "target_revision": {"include": "target_revision"},
    "drafter_revision": {"include": "drafter_revision"},
    "dest": {
        "type": "path",
        "default": None,
        "var": "drafter_config_dest",
        "help": "where to write the config, a file or a folder (none: config.json in the drafter's folder); a "
        "replaced one is kept as config.json.<timestamp>.bak",
    },
    "target_layer_ids": {
        "type": "list",
        "default": None,
        "var": "drafter_target_layer_ids",
        "help": "target layers whose hidden states the drafter fuses, e.g. [1, 16, 31, 46, 61] for a 64-layer "
        "target (none: the existing config's, else the reference spacing, k ids from 1 to N-3, with a warning)",
    },
    "mask_token_id": {
        "type": "int",
        "default": None,
        "var": "drafter_mask_token_id",
        "help": "the mask token id the drafter was trained with, from its model card, e.g. 248070 (none: the "
        "existing config's; with none the task fails and says so)",
    },
    "block_size": {
        "type": "int",
        "default": None,
        "var": "drafter_block_size",
        "help": "draft block size in tokens, the bonus token and the mask tokens (none: the existing config's, "
        "else 16)",
    },
}
# The arguments that decide what runs or which file, folder or address is touched: never built from what a
# host returned when the task runs on the control node (engine/run/trust.py).
CODE_ARGS = ("dest", "hf_home", "target", "drafter")

ARCHITECTURE = "DFlashDraftModel"
# The config fields taken from the drafter's weights (infer_drafter_shape), written as they are.
SHAPE_FIELDS = (
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "intermediate_size",
    "attention_bias",
)
# What the result's `inferred` reports besides SHAPE_FIELDS.
INFERRED_FIELDS = ("fc_shape", "has_own_embed_tokens", "has_own_lm_head", "dtype", "safetensors_dtype")


# ----------------------------------------------------------------------------------------------
# Building the config


def build_config(existing: dict, shape: dict, target: dict, choices: dict, warn) -> dict:
    """The config to write: the existing one (key order, unknown keys, layout kept) with every field
    the weights and the target decide set to its true value. `warn(msg)` reports each correction."""
    cfg = json.loads(json.dumps(existing))  # a deep copy that stays JSON

    def put(key, value, holder=None, label=None, verb="corrected"):
        holder = cfg if holder is None else holder
        old = holder.get(key, None)
        if key in holder and old != value:
            warn(f"{verb} {label or key}: the existing config said {old!r}, now {value!r}")
        holder[key] = value

    put("architectures", [ARCHITECTURE])
    put("model_type", "qwen3")
    for key in SHAPE_FIELDS:
        put(key, shape[key])
    put("vocab_size", shape["vocab_size"])
    if shape.get("draft_vocab_size") is not None:
        put("draft_vocab_size", shape["draft_vocab_size"])
    cfg.setdefault("hidden_act", "silu")
    put("tie_word_embeddings", False)
    cfg.setdefault(
        "rms_norm_eps",
        target["rms_norm_eps"] if target["rms_norm_eps"] is not None else 1e-6,
    )
    if target["max_position_embeddings"] is not None:
        cfg.setdefault("max_position_embeddings", target["max_position_embeddings"])
    if not any(cfg.get(k) for k in ("rope_theta", "rope_scaling", "rope_parameters")):
        cfg.update(json.loads(json.dumps(target["rope"])))
    if shape["dtype"]:
        present = [k for k in ("torch_dtype", "dtype") if k in cfg]
        for key in present or ["torch_dtype", "dtype"]:
            put(key, shape["dtype"])
    put("num_target_layers", target["num_hidden_layers"])
    put("target_hidden_size", target["hidden_size"])

    dflash = cfg.get("dflash_config")
    if not isinstance(dflash, dict):
        dflash = {}
    cfg["dflash_config"] = dflash
    put("target_layer_ids", choices["target_layer_ids"], dflash, "dflash_config.target_layer_ids", "replaced")
    put("mask_token_id", choices["mask_token_id"], dflash, "dflash_config.mask_token_id", "replaced")
    if "mask_token_id" in cfg:  # the older top-level spelling, kept in step
        put("mask_token_id", choices["mask_token_id"], verb="replaced")
    if "target_layer_ids" in cfg:
        put("target_layer_ids", choices["target_layer_ids"], verb="replaced")
    for place in choices["block_size_layout"]:
        label = "block_size" if place == "top" else "dflash_config.block_size"
        put("block_size", choices["block_size"], cfg if place == "top" else dflash, label, "replaced")
    return cfg


def config_warnings(cfg: dict, shape: dict, target: dict, ids: list, where: str) -> list:
    out = []
    layer_types = cfg.get("layer_types")
    if isinstance(layer_types, list) and len(layer_types) != shape["num_hidden_layers"]:
        raise ModuleError(
            f"{where}: layer_types lists {len(layer_types)} entries but the weights hold "
            f"{shape['num_hidden_layers']} layers; fix or remove layer_types"
        )
    aux = cfg.get("eagle_aux_hidden_state_layer_ids")
    if aux is not None and aux != [i + 1 for i in ids]:
        out.append(
            f"{where}: eagle_aux_hidden_state_layer_ids {aux} overrides dflash_config.target_layer_ids {ids} in "
            f"vLLM (which expects ids + 1 = {[i + 1 for i in ids]}); remove it unless it is intended"
        )
    ours, theirs = rope_theta_of(cfg), rope_theta_of(target["rope"])
    if ours is not None and theirs is not None and ours != theirs:
        out.append(
            f"the drafter's rope_theta {ours} differs from the target's {theirs}; a rope mismatch lowers acceptance "
            f"silently; check the drafter's model card"
        )
    if rope_theta_of(cfg) is None and not cfg.get("rope_scaling"):
        out.append("neither the drafter's config nor the target's gives rope_theta; vLLM will assume 1000000")
    if "max_position_embeddings" not in cfg:
        out.append("neither the drafter's config nor the target's gives max_position_embeddings; left unset")
    return out


def render(cfg: dict) -> bytes:
    return (json.dumps(cfg, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


# ----------------------------------------------------------------------------------------------
# What is on disk


class Found:
    """The drafter's header, the config it has (if any), where the new one goes, and the target's facts."""

    def __init__(self, args: dict) -> None:
        self.checkpoint, self.where, self.header_ms = read_drafter(
            locate_model(args["drafter"], hf_home=args["hf_home"], revision=args["drafter_revision"]))
        self.dest = dest_path(args["dest"], self.checkpoint["folder"])
        self.existing_path, self.existing = read_existing(self.dest, self.checkpoint["folder"])
        self.target_path, self.target = read_target(
            locate_model(args["target"], hf_home=args["hf_home"], revision=args["target_revision"]))

    @property
    def existing_where(self) -> str:
        return self.existing_path or "the existing config"


def read_drafter(location: ModelLocation) -> tuple:
    """(checkpoint, where, header read ms) of the drafter checkpoint a path or cached Hub id names;
    `where` names the checkpoint in messages: its one file, else its folder."""
    started = time.perf_counter()
    drafter = require_local(location, "drafter_model", "drafter checkpoint's folder")
    checkpoint = read_checkpoint(drafter)
    header_ms = round((time.perf_counter() - started) * 1000, 3)
    where = checkpoint["files"][0] if len(checkpoint["files"]) == 1 else checkpoint["folder"]
    return checkpoint, where, header_ms


def dest_path(dest: str | None, folder: str) -> str:
    """The config file to write: `dest` (a folder means config.json in it), else config.json beside the weights."""
    path = os.path.abspath(dest or os.path.join(folder, "config.json"))
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
    if not os.path.isdir(os.path.dirname(path)):
        raise ModuleError(f"{path}: its folder does not exist; create it or choose another 'dest'")
    return path


def read_existing(dest: str, folder: str) -> tuple:
    """(path, config) of the config to keep values from: dest, else the drafter's own config.json; (None, {})."""
    for candidate in (dest, os.path.join(folder, "config.json")):
        if os.path.isfile(candidate):
            return candidate, read_config_json(
                candidate,
                "the existing drafter config",
                "its values (mask_token_id, target_layer_ids) cannot be kept; fix it or move it aside and rerun",
            )
    return None, {}


def read_target(location: ModelLocation) -> tuple:
    """(config.json path, checked facts) of the target a folder, a config.json or a cached Hub id names."""
    path = config_json_path(require_local(location, "target_model", "target model's local folder (or its config.json)"))
    raw = read_config_json(path, "the target config", "set target_model to the target model's local folder (with a complete config.json)")
    return path, target_facts(raw, path)


# ----------------------------------------------------------------------------------------------
# Deciding


def decide_shape(found: Found) -> tuple:
    """(shape, k): the drafter's shape with heads and vocabulary resolved; k, the target layers it fuses."""
    shape = infer_drafter_shape(found.checkpoint["tensors"], found.where)
    head_dim, heads, kv_heads = resolve_heads(shape, found.existing, found.where, found.existing_where)
    shape.update(head_dim=head_dim, num_attention_heads=heads, num_key_value_heads=kv_heads)
    shape["vocab_size"] = found.target["vocab_size"] = resolve_vocab(shape, found.target, found.target_path)
    if shape["has_d2t"] and shape["lm_head_vocab_size"] not in (None, shape["vocab_size"]):
        shape["draft_vocab_size"] = shape["lm_head_vocab_size"]
    k = fused_layer_count(shape, found.target, found.where, found.target_path)
    validate_vocab(shape, found.target["vocab_size"], found.where, found.target_path)
    return shape, k


def decide_choices(args: dict, found: Found, shape: dict, k: int) -> dict:
    """target_layer_ids, mask_token_id and block_size, each with the rule that chose it, all checked."""
    n_target = found.target["num_hidden_layers"]
    ids, rule = choose_layer_ids(parse_layer_ids(args["target_layer_ids"]), found.existing, n_target, k)
    validate_layer_ids(shape, ids, rule, n_target, found.where, found.target_path)
    mask, mask_rule = choose_mask_token_id(args["mask_token_id"], found.existing)
    check_mask_token_id(mask, mask_rule, found.target["vocab_size"], found.dest, found.target_path)
    block_size, block_rule, layout = choose_block_size(args["block_size"], found.existing)
    check_block_size(block_size, block_rule)
    return {
        "target_layer_ids": ids,
        "layer_ids_rule": rule,
        "mask_token_id": mask,
        "mask_token_id_rule": mask_rule,
        "block_size": block_size,
        "block_size_rule": block_rule,
        "block_size_layout": layout,
    }


def warn_about_choices(ctx: Context, found: Found, shape: dict, choices: dict, k: int) -> None:
    ids = choices["target_layer_ids"]
    if not shape["dtype"]:
        ctx.warn(f"{found.where}: fc.weight dtype {shape['safetensors_dtype']} has no torch_dtype name; left unset")
    if any(a >= b for a, b in zip(ids, ids[1:])):
        ctx.warn(f"target_layer_ids {ids} are not strictly increasing; check them against the drafter's training setup")
    if choices["layer_ids_rule"] == "reference":
        ctx.warn(
            f"target_layer_ids {ids} were guessed by the reference spacing (k={k} ids from 1 to N-3, N="
            f"{found.target['num_hidden_layers']}); if the drafter was trained with other ids acceptance will be low; "
            f"check its model card and set drafter_target_layer_ids"
        )
    if choices["block_size_rule"] == "default":
        ctx.warn(f"block_size not given and not in an existing config; using {DEFAULT_BLOCK_SIZE}")


# ----------------------------------------------------------------------------------------------
# The task


def summary(shape: dict, choices: dict, k: int) -> str:
    c = choices
    return (
        f"DFlash drafter {shape['num_hidden_layers']} layers, hidden {shape['hidden_size']}, k={k}; "
        f"target_layer_ids {c['target_layer_ids']} ({RULE_TEXT[c['layer_ids_rule']]}); mask_token_id "
        f"{c['mask_token_id']} ({RULE_TEXT[c['mask_token_id_rule']]}); block_size {c['block_size']} "
        f"({RULE_TEXT[c['block_size_rule']]})"
    )


def describe(found: Found, shape: dict, choices: dict, k: int, cfg: dict) -> dict:
    """The result every run returns (registered as drafter_config), before changed/msg/diff/backup are known."""
    target = found.target
    inferred = {key: shape[key] for key in (*SHAPE_FIELDS, *INFERRED_FIELDS)}
    inferred["num_fused_target_layers"] = k
    return {
        "path": found.dest,
        "config": cfg,
        "inferred": inferred,
        "target": {
            "config": found.target_path,
            "num_hidden_layers": target["num_hidden_layers"],
            "hidden_size": target["hidden_size"],
            "vocab_size": target["vocab_size"],
            "multimodal": target["multimodal"],
        },
        "multimodal_target": target["multimodal"],
        **{key: value for key, value in choices.items() if key != "block_size_layout"},
        "existing_config": found.existing_path,
        "files": found.checkpoint["files"],
        "header_bytes_read": found.checkpoint["bytes_read"],
        "header_read_ms": found.header_ms,
        "backup": None,
    }


PUBLISHED_KEYS = ("architectures", "block_size", "dflash_config", "num_hidden_layers", "hidden_size")


def keep_published(dest: str, published: dict, wanted: dict, described: dict, said: str) -> dict:
    """A drafter config.json fetched and verified from the Hub is kept as published (a verified snapshot
    stays verifiable): the values the drafter needs are checked against it, and nothing is written."""
    differs = [key for key in PUBLISHED_KEYS if published.get(key) != wanted.get(key)]
    if differs:
        shown = "; ".join(f"{key}: published {published.get(key)!r}, wanted {wanted.get(key)!r}" for key in differs)
        raise ModuleError(
            f"{dest}: the drafter's published config.json (fetched and verified from the Hub) differs from what "
            f"this run asks for ({shown}); the tool does not alter a verified snapshot. Remove the drafter_* "
            "variables that ask for other values, or fetch a revision of the drafter whose config fits"
        )
    return {"changed": False, **described, "published": True,
            "msg": f"{dest}: the published config.json is kept as fetched and fits: {said}"}


def run(args: dict, ctx: Context) -> dict:
    found = Found(args)
    shape, k = decide_shape(found)
    choices = decide_choices(args, found, shape, k)
    warn_about_choices(ctx, found, shape, choices, k)
    cfg = build_config(found.existing, shape, found.target, choices, ctx.warn)
    ids = choices["target_layer_ids"]
    for msg in config_warnings(cfg, shape, found.target, ids, found.existing_path or found.dest):
        ctx.warn(msg)

    dest = found.dest
    before = found.existing if found.existing_path == dest else None
    if before is not None and is_verified_file(dest):
        return keep_published(dest, before, cfg, describe(found, shape, choices, k, cfg), summary(shape, choices, k))
    result = {"changed": before != cfg, **describe(found, shape, choices, k, cfg)}
    said = summary(shape, choices, k)
    if not result["changed"]:
        result["msg"] = f"{dest} is as wanted: {said}"
        return result
    result["diff"] = {
        "before": render(before).decode("utf-8") if before is not None else "",
        "after": render(cfg).decode("utf-8"),
    }
    if ctx.check:
        result["msg"] = f"would write {dest}: {said}"
        return result
    result["backup"] = atomic_write(dest, render(cfg), backup=before is not None)
    result["msg"] = f"wrote {dest}: {said}" + (f" (previous kept as {result['backup']})" if result["backup"] else "")
    return result


if __name__ == "__main__":
    main(ARGS, run)
