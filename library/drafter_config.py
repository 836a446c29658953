"""Ensure a DFlash drafter has a config.json that vLLM accepts, derived from facts on disk.

Drafters are often published or trained without a usable config.json, or with fields that silently
ruin acceptance (wrong target_layer_ids, a wrong layer count). This module reads only the
safetensors header of the drafter (never the weights) and the target's config.json, infers the
shape, chooses target_layer_ids and mask_token_id, validates everything against the target, and
writes the config atomically, keeping a timestamped backup of the one it replaces.

| argument | type | default | meaning |
|---|---|---|---|
| drafter | path | required | drafter checkpoint: folder, .safetensors file or model.safetensors.index.json |
| target | path | required | target model: folder holding config.json, or the config.json itself |
| dest | path | none | where to write (none: config.json in the drafter's folder) |
| target_layer_ids | list | none | target layers the drafter fuses (none: existing config, else reference spacing) |
| mask_token_id | int | none | the drafter's mask token (none: existing config, else an error) |
| block_size | int | none | draft block size (none: existing config, else 16) |
"""

from __future__ import annotations

import json
import os
import re
import time

from dflash_host.files import atomic_write
from dflash_host.model_config import is_multimodal_target
from dflash_host.module import Context, ModuleError, main
from dflash_host.st_header import MAX_DIM, MAX_INDEX, read_checkpoint
from dflash_host.untrusted_json import brief_repr, load_json_file

ARGS = {
    "drafter": {"type": "path", "required": True},
    "target": {"type": "path", "required": True},
    "dest": {"type": "path", "default": None},
    "target_layer_ids": {"type": "list", "default": None},
    "mask_token_id": {"type": "int", "default": None},
    "block_size": {"type": "int", "default": None},
}

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
DEFAULT_BLOCK_SIZE = 16
MAX_BLOCK_SIZE = 1024  # DFlash drafts block_size - 1 tokens a step; published drafters use 8 or 16
MAX_VOCAB = 2**31 - 1  # token ids are 32-bit in tokenizers and vLLM
MAX_CONFIG_BYTES = 16 * 2**20  # a config.json is a few KB; one with a label map a few MB
MAX_CONFIG_DEPTH = 64  # quantization_config nests ~6 deep
# Rope keys of a multimodal (M-RoPE, partial rotary) target that a Qwen3 drafter must not inherit.
TARGET_ONLY_ROPE_KEYS = ("mrope_section", "mrope_interleaved", "partial_rotary_factor")
SAFETENSORS_DTYPES = {"BF16": "bfloat16", "F16": "float16", "F32": "float32"}
# Tensor names older or converted drafters use, mapped the way vLLM's loader maps them.
NAME_ALIASES = (
    ("encoder.fc.", "fc."),
    ("encoder.output_norm_enc.", "hidden_norm."),
    ("midlayer.", "layers.0."),
)
LAYER_TENSORS = (
    "self_attn.q_proj.weight",
    "self_attn.k_proj.weight",
    "self_attn.v_proj.weight",
    "self_attn.o_proj.weight",
    "mlp.gate_proj.weight",
    "mlp.up_proj.weight",
    "mlp.down_proj.weight",
)
LAYER_RE = re.compile(r"^layers\.(\d+)\.(.+)$")

RULE_TEXT = {
    "given": "given",
    "existing": "from the existing config",
    "reference": "guessed by the reference spacing",
    "default": "the default",
}


# ----------------------------------------------------------------------------------------------
# Pure decisions (no I/O)


def reference_layer_ids(n_target_layers: int, k: int) -> list:
    """The reference DFlash spacing: k ids evenly spaced from 1 to N-3, rounded (z-lab build_target_layer_ids).

    N=64, k=5 gives [1, 16, 31, 46, 61]; k=1 gives [N // 2]. Needs N >= k + 3 for k > 1.
    """
    if k < 1:
        raise ModuleError(f"cannot space {k} target layer ids; the drafter's fc.weight must fuse at least one layer")
    if k == 1:
        return [n_target_layers // 2]
    if n_target_layers < k + 3:
        raise ModuleError(
            f"the reference spacing of target_layer_ids (k={k} ids from 1 to N-3) needs a target of at least "
            f"{k + 3} layers, but the target has N={n_target_layers}; give the ids explicitly "
            f"(module argument target_layer_ids, role variable drafter_target_layer_ids), e.g. "
            f"{list(range(min(k, n_target_layers)))}"
        )
    start, end = 1, n_target_layers - 3
    return [round(start + i * (end - start) / (k - 1)) for i in range(k)]


def parse_layer_ids(value) -> list | None:
    """Accept [1, 16], ["1", "16"], ["1,16"], ["[1, 16]"] (forms YAML and -e give); None stays None."""
    if value is None:
        return None
    if isinstance(value, (list, tuple)) and len(value) == 1 and isinstance(value[0], str):
        text = value[0].strip()
        if text.lower() in ("", "none", "null"):
            return None
        if text.startswith("["):
            try:
                value = json.loads(text)
            except ValueError:
                raise ModuleError(f"target_layer_ids {text!r} is not a JSON list of integers; write e.g. [1, 16, 31]")
        else:
            value = [p for p in text.split(",") if p.strip()]
    ids = []
    for item in value if isinstance(value, (list, tuple)) else [value]:
        if isinstance(item, bool):
            ids = None
            break
        try:
            ids.append(int(str(item).strip()) if isinstance(item, str) else int(item))
        except (TypeError, ValueError, OverflowError):  # OverflowError: YAML's .inf
            ids = None
            break
        if not isinstance(item, str) and item != int(item):
            ids = None
            break
    if not ids:
        raise ModuleError(f"target_layer_ids {value!r} is not a non-empty list of integers; write e.g. [1, 16, 31]")
    return ids


def _normalise_names(tensors: dict) -> dict:
    out = {}
    for name, entry in tensors.items():
        short = name.removeprefix("model.")
        for old, new in NAME_ALIASES:
            if short.startswith(old):
                short = new + short[len(old) :]
        out.setdefault(short, entry)
    return out


def infer_drafter_shape(tensors: dict, where: str) -> dict:
    """Shape facts of a DFlash drafter from its tensor table {name: {"dtype", "shape"}}.

    `where` names the checkpoint in errors. head_dim is None when there is no q_norm/k_norm.
    """
    names = _normalise_names(tensors)
    fc = names.get("fc.weight")
    if fc is None:
        sample = ", ".join(sorted(names)[:4])
        raise ModuleError(
            f"{where}: no fc.weight tensor, so this is not a DFlash drafter checkpoint (a DFlash drafter fuses k "
            f"target layers through fc.weight [H, H*k]); its {len(names)} tensors start with: {sample}; point "
            f"'drafter' at the DFlash checkpoint"
        )
    if len(fc["shape"]) != 2:
        raise ModuleError(f"{where}: fc.weight has shape {fc['shape']}, expected 2 dimensions [H, H*k]")
    hidden, fc_width = fc["shape"]

    layers = _layer_shapes(names, where)
    count = len(layers)
    first = layers[0]
    for i in range(count):
        for t in LAYER_TENSORS:
            if t not in layers[i]:
                raise ModuleError(f"{where}: layers.{i}.{t} is missing; the checkpoint is incomplete or not Qwen3-style")
            if layers[i][t] != first[t]:
                raise ModuleError(
                    f"{where}: layers.{i}.{t} has shape {layers[i][t]} but layers.0.{t} has {first[t]}; "
                    f"layers of one drafter must match"
                )
    q_rows, q_cols = _matrix(first, "self_attn.q_proj.weight", where)
    k_rows, k_cols = _matrix(first, "self_attn.k_proj.weight", where)
    v_rows, _ = _matrix(first, "self_attn.v_proj.weight", where)
    o_rows, o_cols = _matrix(first, "self_attn.o_proj.weight", where)
    gate_rows, gate_cols = _matrix(first, "mlp.gate_proj.weight", where)
    up_rows, _ = _matrix(first, "mlp.up_proj.weight", where)
    down_rows, down_cols = _matrix(first, "mlp.down_proj.weight", where)
    for label, got in (
        ("q_proj columns", q_cols),
        ("k_proj columns", k_cols),
        ("o_proj rows", o_rows),
        ("gate_proj columns", gate_cols),
        ("down_proj rows", down_rows),
    ):
        if got != hidden:
            raise ModuleError(
                f"{where}: layers.0 {label} are {got} but fc.weight says the hidden size is {hidden}; "
                f"the checkpoint is inconsistent"
            )
    if v_rows != k_rows:
        raise ModuleError(f"{where}: layers.0 v_proj has {v_rows} rows but k_proj has {k_rows}; they must match")
    if o_cols != q_rows:
        raise ModuleError(f"{where}: layers.0 o_proj has {o_cols} columns but q_proj has {q_rows} rows; they must match")
    if up_rows != gate_rows or down_cols != gate_rows:
        raise ModuleError(
            f"{where}: layers.0 MLP sizes disagree: gate_proj {gate_rows}, up_proj {up_rows}, down_proj columns {down_cols}"
        )
    head_dim = None
    q_norm, k_norm = (
        first.get("self_attn.q_norm.weight"),
        first.get("self_attn.k_norm.weight"),
    )
    if q_norm is not None or k_norm is not None:
        sizes = {tuple(s) for s in (q_norm, k_norm) if s is not None}
        if len(sizes) != 1 or len(next(iter(sizes))) != 1:
            raise ModuleError(f"{where}: layers.0 q_norm {q_norm} and k_norm {k_norm} must both be [head_dim]")
        head_dim = next(iter(sizes))[0]
    _require_sizes(
        where,
        {
            "hidden size (fc.weight rows)": hidden,
            "fc.weight width": fc_width,
            "q_proj rows": q_rows,
            "k_proj rows": k_rows,
            "intermediate size (gate_proj rows)": gate_rows,
            "head_dim (q_norm/k_norm size)": 1 if head_dim is None else head_dim,
        },
    )

    embed, lm_head = names.get("embed_tokens.weight"), names.get("lm_head.weight")
    for label, entry in (("embed_tokens.weight", embed), ("lm_head.weight", lm_head)):
        if entry is not None and (len(entry["shape"]) != 2 or entry["shape"][1] != hidden):
            raise ModuleError(f"{where}: {label} has shape {entry['shape']}, expected [vocab, {hidden}]")
    return {
        "hidden_size": hidden,
        "fc_shape": [hidden, fc_width],
        "num_hidden_layers": count,
        "q_proj_rows": q_rows,
        "kv_proj_rows": k_rows,
        "head_dim": head_dim,
        "intermediate_size": gate_rows,
        "attention_bias": "layers.0.self_attn.q_proj.bias" in names,
        "has_own_embed_tokens": embed is not None,
        "has_own_lm_head": lm_head is not None,
        "embed_vocab_size": embed["shape"][0] if embed else None,
        "lm_head_vocab_size": lm_head["shape"][0] if lm_head else None,
        "has_d2t": "d2t" in names,
        "safetensors_dtype": fc["dtype"],
        "dtype": SAFETENSORS_DTYPES.get(fc["dtype"]),
    }


def _layer_shapes(names: dict, where: str) -> dict:
    """{layer index: {tensor suffix: shape}} for layers 0..N-1, every index in between present.

    An index above MAX_INDEX is refused before any per-index work, so a header declaring
    layers.100000000.* costs nothing (it once built a list of 100 million missing indices).
    """
    layers: dict = {}
    for name, entry in names.items():
        m = LAYER_RE.match(name)
        if not m:
            continue
        digits = m.group(1)
        if len(digits) > len(str(MAX_INDEX)) or int(digits) > MAX_INDEX:
            shown = digits if len(digits) <= 12 else f"{digits[:12]}... ({len(digits)} digits)"
            raise ModuleError(
                f"{where}: tensor layers.{shown}.* names a layer above {MAX_INDEX}, more layers than any drafter "
                f"has; the checkpoint is damaged or crafted"
            )
        layers.setdefault(int(digits), {})[m.group(2)] = entry["shape"]
    if not layers:
        raise ModuleError(f"{where}: no decoder layer tensors (layers.N.*) next to fc.weight; the checkpoint is incomplete")
    count = max(layers) + 1
    if len(layers) != count:
        absent = [i for i in range(count) if i not in layers]
        shown = ", ".join(map(str, absent[:10])) + (f" and {len(absent) - 10} more" if len(absent) > 10 else "")
        raise ModuleError(
            f"{where}: decoder layers are not numbered 0..{count - 1}: layer(s) {shown} missing; the checkpoint "
            f"is incomplete (a missing shard?)"
        )
    return layers


def _require_sizes(where: str, sizes: dict) -> None:
    """Every size the config takes from the weights is at least 1 (a 0 would be divided by, or written)."""
    for label, size in sizes.items():
        if size < 1:
            raise ModuleError(
                f"{where}: the drafter's {label} is {size}; a layer of size 0 is not a model, the checkpoint is damaged"
            )


def _matrix(layer: dict, name: str, where: str) -> tuple:
    shape = layer[name]
    if len(shape) != 2:
        raise ModuleError(f"{where}: layers.0.{name} has shape {shape}, expected 2 dimensions")
    return shape[0], shape[1]


def resolve_heads(shape: dict, existing: dict, where: str, existing_where: str) -> tuple:
    """(head_dim, num_attention_heads, num_key_value_heads) from q/k_norm, else the existing config's head_dim."""
    head_dim = shape["head_dim"]
    source = "q_norm/k_norm"
    if head_dim is None:
        head_dim = existing.get("head_dim")
        source = f"head_dim in {existing_where}"
        if not _is_int(head_dim) or head_dim <= 0:
            raise ModuleError(
                f"{where}: no q_norm/k_norm tensors to read head_dim from, and no existing config gives head_dim; "
                f"write a config.json with head_dim next to the weights (or is this not a Qwen3-style drafter?)"
            )
    q_rows, kv_rows = shape["q_proj_rows"], shape["kv_proj_rows"]
    heads = existing.get("num_attention_heads") if shape["head_dim"] is None else None
    if _is_int(heads) and heads * head_dim != q_rows:
        raise ModuleError(
            f"{existing_where}: num_attention_heads {heads} x head_dim {head_dim} = {heads * head_dim}, but "
            f"q_proj in {where} has {q_rows} rows; fix num_attention_heads or head_dim"
        )
    if q_rows % head_dim or kv_rows % head_dim:
        raise ModuleError(
            f"{where}: q_proj rows {q_rows} and k_proj rows {kv_rows} are not multiples of head_dim {head_dim} "
            f"(from {source}); the checkpoint or head_dim is wrong"
        )
    return head_dim, q_rows // head_dim, kv_rows // head_dim


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# The target's numbers the drafter's config takes: key -> (required, check, what it must be).
TARGET_NUMBERS = {
    "num_hidden_layers": (True, lambda v: _is_int(v) and 1 <= v <= MAX_INDEX, f"a whole number from 1 to {MAX_INDEX}"),
    "hidden_size": (True, lambda v: _is_int(v) and 1 <= v < MAX_DIM, f"a whole number from 1 to {MAX_DIM - 1}"),
    "vocab_size": (False, lambda v: _is_int(v) and 1 <= v <= MAX_VOCAB, f"a whole number from 1 to {MAX_VOCAB}"),
    "max_position_embeddings": (False, lambda v: _is_int(v) and 1 <= v < MAX_DIM, f"a whole number from 1 to {MAX_DIM - 1}"),
    "rms_norm_eps": (
        False,
        lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < 1,
        "a number between 0 and 1",
    ),
}


def target_facts(config: dict, where: str) -> dict:
    """The target's text-model fields, looking under text_config first (multimodal checkpoints).

    Each number the drafter's config takes from the target is checked here: a config.json saying
    vocab_size "lots" (or 0, or 2**63) is refused by name instead of failing later as a TypeError.
    """
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}

    def get(key):
        return text[key] if key in text else config.get(key)

    looked = f"looked at the top level{' and under text_config' if text else ''}"
    facts = {"multimodal": is_multimodal_target(config)}
    for key, (required, ok, must) in TARGET_NUMBERS.items():
        value = get(key)
        if value is None and not required:
            facts[key] = None
        elif value is None or not ok(value):
            found = "missing" if value is None else brief_repr(value)
            raise ModuleError(
                f"{where}: the target config has no usable {key} ({found}; {looked}); it must be {must}; set "
                f"target_model to the target model's own config.json"
            )
        else:
            facts[key] = value
    facts["dtype"] = get("dtype") or get("torch_dtype")
    facts["rope"] = target_rope(text, config)
    return facts


def target_rope(text: dict, top: dict) -> dict:
    """The rope fields a Qwen3 drafter should carry, in the target's layout (rope_parameters, or rope_theta
    and rope_scaling), without the M-RoPE / partial-rotary keys of a multimodal target."""

    def get(key):
        return text[key] if key in text else top.get(key)

    params = get("rope_parameters")
    if isinstance(params, dict) and params:
        if all(isinstance(v, dict) for v in params.values()):  # per layer type
            params = params.get("full_attention") or next(iter(params.values()))
        clean = {k: v for k, v in params.items() if k not in TARGET_ONLY_ROPE_KEYS}
        clean.setdefault("rope_type", clean.pop("type", "default"))
        if clean["rope_type"] == "mrope":  # multimodal position ids; a text-only drafter uses plain rope
            clean["rope_type"] = "default"
        if "rope_theta" not in clean and get("rope_theta") is not None:
            clean["rope_theta"] = get("rope_theta")
        out = {"rope_parameters": clean}
        if "rope_theta" in clean:  # for readers that predate rope_parameters (transformers 4.x, MLX)
            out["rope_theta"] = clean["rope_theta"]
        return out
    out = {}
    if get("rope_theta") is not None:
        out["rope_theta"] = get("rope_theta")
    scaling = get("rope_scaling")
    if isinstance(scaling, dict) and scaling:
        scaling = {k: v for k, v in scaling.items() if k not in TARGET_ONLY_ROPE_KEYS}
        if scaling.get("rope_type", scaling.get("type")) not in (None, "default", "mrope"):
            out["rope_scaling"] = scaling
    return out


def rope_theta_of(fields: dict):
    params = fields.get("rope_parameters")
    if isinstance(params, dict) and "rope_theta" in params:
        return params["rope_theta"]
    return fields.get("rope_theta")


def choose_layer_ids(given, existing: dict, n_target: int, k: int) -> tuple:
    """(ids, rule): the argument, else the existing config's dflash_config, else the reference spacing."""
    if given is not None:
        return list(given), "given"
    dflash = existing.get("dflash_config") if isinstance(existing.get("dflash_config"), dict) else {}
    for ids in (dflash.get("target_layer_ids"), existing.get("target_layer_ids")):
        if ids is not None:
            return parse_layer_ids(ids if isinstance(ids, list) else [str(ids)]), "existing"
    return reference_layer_ids(n_target, k), "reference"


def choose_mask_token_id(given, existing: dict) -> tuple:
    """(id, rule) or (None, None) when neither the argument nor an existing config has one."""
    if given is not None:
        return given, "given"
    dflash = existing.get("dflash_config") if isinstance(existing.get("dflash_config"), dict) else {}
    for value in (dflash.get("mask_token_id"), existing.get("mask_token_id")):
        if isinstance(value, int) and not isinstance(value, bool):
            return value, "existing"
    return None, None


def choose_block_size(given, existing: dict) -> tuple:
    """(size, rule, layout) where layout lists where it is written: "top" (older) and/or "nested" (newer)."""
    dflash = existing.get("dflash_config") if isinstance(existing.get("dflash_config"), dict) else {}
    layout = [place for place, holder in (("top", existing), ("nested", dflash)) if "block_size" in holder]
    if not layout:
        layout = ["top"]
    if given is not None:
        return given, "given", layout
    for value in (dflash.get("block_size"), existing.get("block_size")):
        if isinstance(value, int) and not isinstance(value, bool):
            return value, "existing", layout
    return DEFAULT_BLOCK_SIZE, "default", layout


def fused_layer_count(shape: dict, target: dict, where: str, target_where: str) -> int:
    """k, the number of target layers fc.weight [H, H*k] fuses; refuses a hidden size that differs from the target's."""
    hidden, width = shape["fc_shape"]
    if hidden != target["hidden_size"]:
        raise ModuleError(
            f"{where}: the drafter's hidden size is {hidden} (fc.weight rows) but the target {target_where} has "
            f"hidden_size {target['hidden_size']}; this drafter was trained for another target"
        )
    if hidden == 0 or width == 0 or width % hidden:
        raise ModuleError(
            f"{where}: fc.weight is {shape['fc_shape']}: its width {width} is not a multiple of the hidden size "
            f"{hidden} (expected H*k for k fused target layers); the checkpoint is not a DFlash drafter"
        )
    return width // hidden


def validate_layer_ids(shape: dict, ids: list, rule: str, n_target: int, where: str, target_where: str) -> None:
    """The ids must match fc.weight's width (H*len(ids)) and lie inside the target (0..N-1)."""
    hidden, width = shape["fc_shape"]
    k = width // hidden
    source = {
        "given": "given",
        "existing": "in the existing config",
        "reference": "chosen",
    }[rule]
    if len(ids) != k:
        raise ModuleError(
            f"{where}: fc.weight is {shape['fc_shape']} = hidden {hidden} x k={k} fused target layers, but the "
            f"target_layer_ids {source} name {len(ids)} ({ids}); H*len(ids) = {hidden}*{len(ids)} = "
            f"{hidden * len(ids)} != fc width {width}; give exactly {k} ids"
        )
    outside = [i for i in ids if not 0 <= i < n_target]
    if outside:
        raise ModuleError(
            f"target_layer_ids {ids} ({source}) has id(s) {outside} outside 0..{n_target - 1}: the target "
            f"{target_where} has {n_target} layers; give ids between 0 and {n_target - 1}"
        )


def validate_vocab(shape: dict, vocab: int | None, where: str, target_where: str) -> None:
    """A drafter's own embed_tokens / lm_head must cover the target's vocabulary (lm_head may be reduced with d2t)."""
    for label, rows in (
        ("embed_tokens", shape["embed_vocab_size"]),
        ("lm_head", shape["lm_head_vocab_size"]),
    ):
        if rows is None or vocab is None or rows == vocab:
            continue
        if label == "lm_head" and shape["has_d2t"]:
            continue  # a reduced draft vocabulary mapped back through d2t
        raise ModuleError(
            f"{where}: the drafter's own {label} has {rows} rows but the target {target_where} has vocab_size "
            f"{vocab}; this drafter was trained for another tokenizer"
        )


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


# ----------------------------------------------------------------------------------------------
# I/O


def read_json(path: str, what: str, fix: str) -> dict:
    """A config.json as an object; size and nesting bounded (a crafted one once raised RecursionError)."""
    try:
        data = load_json_file(path, MAX_CONFIG_BYTES, MAX_CONFIG_DEPTH)
    except FileNotFoundError:
        raise ModuleError(f"{path}: no such file; {fix}")
    except ValueError as exc:
        raise ModuleError(f"{path}: {what} is not valid JSON ({exc}); {fix}")
    except OSError as exc:
        raise ModuleError(f"{path}: cannot read {what} ({exc.strerror})")
    if not isinstance(data, dict):
        raise ModuleError(f"{path}: {what} is JSON but not an object (got {type(data).__name__}); {fix}")
    return data


HUB_ID_RE = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def hub_cache_snapshot(repo_id: str, environ: dict | None = None) -> str | None:
    """The local snapshot folder of a Hugging Face Hub id in the host's cache, or None.

    Follows refs/main when present, else the most recently modified snapshot. Nothing is downloaded.
    """
    env = os.environ if environ is None else environ
    if not HUB_ID_RE.match(repo_id):
        return None
    hf_home = env.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface")
    cache = env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE") or os.path.join(hf_home, "hub")
    repo = os.path.join(cache, "models--" + repo_id.replace("/", "--"))
    snapshots = os.path.join(repo, "snapshots")
    try:
        with open(os.path.join(repo, "refs", "main"), encoding="ascii") as fh:
            candidate = os.path.join(snapshots, fh.read().strip())
        if os.path.isdir(candidate):
            return candidate
    except OSError:
        pass
    try:
        found = [os.path.join(snapshots, d) for d in os.listdir(snapshots)]
    except OSError:
        return None
    found = [d for d in found if os.path.isdir(d)]
    return max(found, key=os.path.getmtime) if found else None


def resolve_location(value: str, what: str, variable: str) -> str:
    """A path as given, or a Hub id resolved to its snapshot in the host's Hugging Face cache."""
    if os.path.exists(value):
        return value
    snapshot = hub_cache_snapshot(value)
    if snapshot:
        return snapshot
    hint = (
        " (it looks like a Hub id, but it is not in this host's Hugging Face cache; download it first)"
        if HUB_ID_RE.match(value)
        else ""
    )
    raise ModuleError(f"{value}: no such file or folder{hint}; set {variable} to the {what}")


def target_config_path(target: str) -> str:
    target = resolve_location(target, "target model's local folder (or its config.json)", "target_model")
    if os.path.isdir(target):
        return os.path.join(target, "config.json")
    return target


def resolve_vocab(shape: dict, target: dict, target_path: str) -> int:
    """The target's vocab_size; a target config without one falls back to the drafter's own embed_tokens."""
    if target["vocab_size"] is not None:
        return target["vocab_size"]
    own = shape["embed_vocab_size"] or (shape["lm_head_vocab_size"] if not shape["has_d2t"] else None)
    if own is None:
        raise ModuleError(
            f"{target_path}: the target config has no vocab_size (looked at the top level and under "
            f"text_config) and the drafter has no own embed_tokens to read it from; use the target's own "
            f"config.json"
        )
    return own


def render(cfg: dict) -> bytes:
    return (json.dumps(cfg, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def run(args: dict, ctx: Context) -> dict:
    started = time.perf_counter()
    drafter = resolve_location(args["drafter"], "drafter checkpoint's folder", "drafter_model")
    checkpoint = read_checkpoint(drafter)
    header_s = time.perf_counter() - started
    folder = checkpoint["folder"]
    where = checkpoint["files"][0] if len(checkpoint["files"]) == 1 else folder
    dest = os.path.abspath(args["dest"] or os.path.join(folder, "config.json"))
    if os.path.isdir(dest):
        dest = os.path.join(dest, "config.json")
    if not os.path.isdir(os.path.dirname(dest)):
        raise ModuleError(f"{dest}: its folder does not exist; create it or choose another 'dest'")

    # The existing config: dest, else the drafter's own config.json (when writing elsewhere).
    existing_path = None
    for candidate in (dest, os.path.join(folder, "config.json")):
        if os.path.isfile(candidate):
            existing_path = candidate
            break
    existing = {}
    if existing_path:
        existing = read_json(
            existing_path,
            "the existing drafter config",
            "its values (mask_token_id, target_layer_ids) cannot be kept; fix it or move it aside and rerun",
        )
    existing_where = existing_path or "the existing config"

    target_path = target_config_path(args["target"])
    target_raw = read_json(
        target_path,
        "the target config",
        "set target_model to the target model's local folder (with a complete config.json)",
    )
    target = target_facts(target_raw, target_path)

    shape = infer_drafter_shape(checkpoint["tensors"], where)
    head_dim, heads, kv_heads = resolve_heads(shape, existing, where, existing_where)
    shape.update(head_dim=head_dim, num_attention_heads=heads, num_key_value_heads=kv_heads)
    shape["vocab_size"] = target["vocab_size"] = resolve_vocab(shape, target, target_path)
    if shape["has_d2t"] and shape["lm_head_vocab_size"] not in (None, shape["vocab_size"]):
        shape["draft_vocab_size"] = shape["lm_head_vocab_size"]

    k = fused_layer_count(shape, target, where, target_path)
    validate_vocab(shape, target["vocab_size"], where, target_path)
    given_ids = parse_layer_ids(args["target_layer_ids"])
    ids, rule = choose_layer_ids(given_ids, existing, target["num_hidden_layers"], k)
    validate_layer_ids(shape, ids, rule, target["num_hidden_layers"], where, target_path)
    mask, mask_rule = choose_mask_token_id(args["mask_token_id"], existing)
    if mask is None:
        raise ModuleError(
            f"{dest}: mask_token_id is needed and not known: no argument and no existing config gives it. It is "
            f"the id of the mask token the drafter was trained with, from the drafter's training setup or model "
            f"card (e.g. 151669 for Qwen3 drafters, 248070 or 248077 for Qwen3.5/3.6 ones); set the role "
            f"variable drafter_mask_token_id (module argument mask_token_id)"
        )
    if not 0 <= mask < target["vocab_size"]:
        raise ModuleError(
            f"mask_token_id {mask} ({RULE_TEXT[mask_rule]}) is outside the target's vocabulary "
            f"0..{target['vocab_size'] - 1} ({target_path}); use the mask id from the drafter's model card"
        )
    block_size, block_rule, layout = choose_block_size(args["block_size"], existing)
    if block_size < 2:
        raise ModuleError(f"block_size {block_size} ({RULE_TEXT[block_rule]}) must be at least 2 (the bonus token and one mask)")
    if block_size > MAX_BLOCK_SIZE:
        raise ModuleError(
            f"block_size {block_size} ({RULE_TEXT[block_rule]}) is more than {MAX_BLOCK_SIZE}; DFlash drafters use 8 "
            f"or 16: give the drafter's own block_size (role variable drafter_block_size)"
        )
    if not shape["dtype"]:
        ctx.warn(f"{where}: fc.weight dtype {shape['safetensors_dtype']} has no torch_dtype name; left unset")
    if any(a >= b for a, b in zip(ids, ids[1:])):
        ctx.warn(f"target_layer_ids {ids} are not strictly increasing; check them against the drafter's training setup")
    if rule == "reference":
        ctx.warn(
            f"target_layer_ids {ids} were guessed by the reference spacing (k={k} ids from 1 to N-3, N="
            f"{target['num_hidden_layers']}); if the drafter was trained with other ids acceptance will be low; "
            f"check its model card and set drafter_target_layer_ids"
        )
    if block_rule == "default":
        ctx.warn(f"block_size not given and not in an existing config; using {DEFAULT_BLOCK_SIZE}")

    choices = {
        "target_layer_ids": ids,
        "mask_token_id": mask,
        "block_size": block_size,
        "block_size_layout": layout,
    }
    cfg = build_config(existing, shape, target, choices, ctx.warn)
    for msg in config_warnings(cfg, shape, target, ids, existing_where if existing_path else dest):
        ctx.warn(msg)

    before = existing if existing_path == dest else None
    changed = before != cfg
    inferred = {
        key: shape[key]
        for key in (
            *SHAPE_FIELDS,
            "fc_shape",
            "has_own_embed_tokens",
            "has_own_lm_head",
            "dtype",
            "safetensors_dtype",
        )
    }
    inferred["num_fused_target_layers"] = k
    summary = (
        f"DFlash drafter {shape['num_hidden_layers']} layers, hidden {shape['hidden_size']}, k={k}; "
        f"target_layer_ids {ids} ({RULE_TEXT[rule]}); mask_token_id {mask} ({RULE_TEXT[mask_rule]}); "
        f"block_size {block_size} ({RULE_TEXT[block_rule]})"
    )
    result = {
        "changed": changed,
        "path": dest,
        "config": cfg,
        "inferred": inferred,
        "target": {
            "config": target_path,
            "num_hidden_layers": target["num_hidden_layers"],
            "hidden_size": target["hidden_size"],
            "vocab_size": target["vocab_size"],
            "multimodal": target["multimodal"],
        },
        "multimodal_target": target["multimodal"],
        "target_layer_ids": ids,
        "layer_ids_rule": rule,
        "mask_token_id": mask,
        "mask_token_id_rule": mask_rule,
        "block_size": block_size,
        "block_size_rule": block_rule,
        "existing_config": existing_path,
        "files": checkpoint["files"],
        "header_bytes_read": checkpoint["bytes_read"],
        "header_read_ms": round(header_s * 1000, 3),
        "backup": None,
    }
    if not changed:
        result["msg"] = f"{dest} is as wanted: {summary}"
        return result
    result["diff"] = {
        "before": render(before).decode("utf-8") if before is not None else "",
        "after": render(cfg).decode("utf-8"),
    }
    if ctx.check:
        result["msg"] = f"would write {dest}: {summary}"
        return result
    result["backup"] = atomic_write(dest, render(cfg), backup=before is not None)
    result["msg"] = f"wrote {dest}: {summary}" + (f" (previous kept as {result['backup']})" if result["backup"] else "")
    return result


if __name__ == "__main__":
    main(ARGS, run)
