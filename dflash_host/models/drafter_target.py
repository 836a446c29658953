"""What a DFlash drafter's config takes from its target's config.json, checked, and how the two must fit.

`target_facts` reads the target's text-model numbers (under text_config for multimodal checkpoints)
and its rope fields; `fused_layer_count`, `resolve_vocab` and `validate_vocab` check the drafter's
shape (drafter_shape) against them. Used by drafter_config.
"""

from __future__ import annotations

from dflash_host.host.untrusted_json import brief_repr
from dflash_host.models.config import is_multimodal_target
from dflash_host.models.drafter_shape import is_int
from dflash_host.models.safetensors_header import MAX_DIM, MAX_INDEX
from dflash_host.module import ModuleError

MAX_VOCAB = 2**31 - 1  # token ids are 32-bit in tokenizers and vLLM
# Rope keys of a multimodal (M-RoPE, partial rotary) target that a Qwen3 drafter must not inherit.
TARGET_ONLY_ROPE_KEYS = ("mrope_section", "mrope_interleaved", "partial_rotary_factor")

# The target's numbers the drafter's config takes: key -> (required, check, what it must be).
TARGET_NUMBERS = {
    "num_hidden_layers": (True, lambda v: is_int(v) and 1 <= v <= MAX_INDEX, f"a whole number from 1 to {MAX_INDEX}"),
    "hidden_size": (True, lambda v: is_int(v) and 1 <= v < MAX_DIM, f"a whole number from 1 to {MAX_DIM - 1}"),
    "vocab_size": (False, lambda v: is_int(v) and 1 <= v <= MAX_VOCAB, f"a whole number from 1 to {MAX_VOCAB}"),
    "max_position_embeddings": (False, lambda v: is_int(v) and 1 <= v < MAX_DIM, f"a whole number from 1 to {MAX_DIM - 1}"),
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
    section = config.get("text_config")
    text: dict = section if isinstance(section, dict) else {}

    def get(key):
        return text[key] if key in text else config.get(key)

    looked = f"looked at the top level{' and under text_config' if text else ''}"
    facts: dict = {"multimodal": is_multimodal_target(config)}
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
    """rope_theta in either layout: inside rope_parameters (newer) or at the top level (older)."""
    params = fields.get("rope_parameters")
    if isinstance(params, dict) and "rope_theta" in params:
        return params["rope_theta"]
    return fields.get("rope_theta")


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
