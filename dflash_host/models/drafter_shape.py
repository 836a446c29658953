"""The shape of a DFlash drafter, read from its safetensors tensor table (never its weights).

A DFlash drafter fuses k target layers through fc.weight [H, H*k] and has N Qwen3-style decoder
layers (layers.0..N-1.*). `infer_drafter_shape` checks that every size agrees with every other and
returns the numbers its config.json must carry; `resolve_heads` splits the attention rows into heads.
Every inconsistency is a ModuleError naming the checkpoint (`where`). Used by drafter_config.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from dflash_host.models.safetensors_header import MAX_INDEX, oversized_index
from dflash_host.module import ModuleError

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

if TYPE_CHECKING:  # annotations only
    from typing import TypeGuard


def is_int(value: object) -> TypeGuard[int]:
    """A whole number, and not a bool (JSON's true is no layer count)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _normalise_names(tensors: dict) -> dict:
    out: dict = {}
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
    fc = _fc_weight(names, where)
    hidden, fc_width = fc["shape"]
    layers = _layer_shapes(names, where)
    _check_layers_agree(layers, where)
    first = layers[0]
    sizes = _layer_sizes(first, hidden, where)
    head_dim = _head_dim_from_norms(first, where)
    _require_sizes(
        where,
        {
            "hidden size (fc.weight rows)": hidden,
            "fc.weight width": fc_width,
            "q_proj rows": sizes["q_rows"],
            "k_proj rows": sizes["k_rows"],
            "intermediate size (gate_proj rows)": sizes["gate_rows"],
            "head_dim (q_norm/k_norm size)": 1 if head_dim is None else head_dim,
        },
    )
    embed, lm_head = _own_vocab_tensors(names, hidden, where)
    return {
        "hidden_size": hidden,
        "fc_shape": [hidden, fc_width],
        "num_hidden_layers": len(layers),
        "q_proj_rows": sizes["q_rows"],
        "kv_proj_rows": sizes["k_rows"],
        "head_dim": head_dim,
        "intermediate_size": sizes["gate_rows"],
        "attention_bias": "layers.0.self_attn.q_proj.bias" in names,
        "has_own_embed_tokens": embed is not None,
        "has_own_lm_head": lm_head is not None,
        "embed_vocab_size": embed["shape"][0] if embed else None,
        "lm_head_vocab_size": lm_head["shape"][0] if lm_head else None,
        "has_d2t": "d2t" in names,
        "safetensors_dtype": fc["dtype"],
        "dtype": SAFETENSORS_DTYPES.get(fc["dtype"]),
    }


def _fc_weight(names: dict, where: str) -> dict:
    """fc.weight's entry: the tensor that makes a checkpoint a DFlash drafter, [H, H*k]."""
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
    return fc


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
        shown = oversized_index(m.group(1))
        if shown is not None:
            raise ModuleError(
                f"{where}: tensor layers.{shown}.* names a layer above {MAX_INDEX}, more layers than any drafter "
                f"has; the checkpoint is damaged or crafted"
            )
        layers.setdefault(int(m.group(1)), {})[m.group(2)] = entry["shape"]
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


def _check_layers_agree(layers: dict, where: str) -> None:
    """Every layer holds every projection, each the shape layer 0's has."""
    first = layers[0]
    for i in range(len(layers)):
        for t in LAYER_TENSORS:
            if t not in layers[i]:
                raise ModuleError(f"{where}: layers.{i}.{t} is missing; the checkpoint is incomplete or not Qwen3-style")
            if layers[i][t] != first[t]:
                raise ModuleError(
                    f"{where}: layers.{i}.{t} has shape {layers[i][t]} but layers.0.{t} has {first[t]}; "
                    f"layers of one drafter must match"
                )


def _matrix(layer: dict, name: str, where: str) -> tuple:
    shape = layer[name]
    if len(shape) != 2:
        raise ModuleError(f"{where}: layers.0.{name} has shape {shape}, expected 2 dimensions")
    return shape[0], shape[1]


def _layer_sizes(first: dict, hidden: int, where: str) -> dict:
    """Layer 0's projections checked against each other and the hidden size: q, k rows and the MLP width."""
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
    return {"q_rows": q_rows, "k_rows": k_rows, "gate_rows": gate_rows}


def _head_dim_from_norms(first: dict, where: str) -> int | None:
    """head_dim from q_norm/k_norm [head_dim]; None when the drafter has neither."""
    q_norm, k_norm = first.get("self_attn.q_norm.weight"), first.get("self_attn.k_norm.weight")
    if q_norm is None and k_norm is None:
        return None
    sizes = {tuple(s) for s in (q_norm, k_norm) if s is not None}
    if len(sizes) != 1 or len(next(iter(sizes))) != 1:
        raise ModuleError(f"{where}: layers.0 q_norm {q_norm} and k_norm {k_norm} must both be [head_dim]")
    return next(iter(sizes))[0]


def _require_sizes(where: str, sizes: dict) -> None:
    """Every size the config takes from the weights is at least 1 (a 0 would be divided by, or written)."""
    for label, size in sizes.items():
        if size < 1:
            raise ModuleError(
                f"{where}: the drafter's {label} is {size}; a layer of size 0 is not a model, the checkpoint is damaged"
            )


def _own_vocab_tensors(names: dict, hidden: int, where: str) -> tuple:
    """(embed_tokens, lm_head) entries of a drafter that has its own, each [vocab, H]; None where absent."""
    embed, lm_head = names.get("embed_tokens.weight"), names.get("lm_head.weight")
    for label, entry in (("embed_tokens.weight", embed), ("lm_head.weight", lm_head)):
        if entry is not None and (len(entry["shape"]) != 2 or entry["shape"][1] != hidden):
            raise ModuleError(f"{where}: {label} has shape {entry['shape']}, expected [vocab, {hidden}]")
    return embed, lm_head


def resolve_heads(shape: dict, existing: dict, where: str, existing_where: str) -> tuple:
    """(head_dim, num_attention_heads, num_key_value_heads) from q/k_norm, else the existing config's head_dim."""
    head_dim = shape["head_dim"]
    source = "q_norm/k_norm"
    if head_dim is None:
        head_dim = existing.get("head_dim")
        source = f"head_dim in {existing_where}"
        if not is_int(head_dim) or head_dim <= 0:
            raise ModuleError(
                f"{where}: no q_norm/k_norm tensors to read head_dim from, and no existing config gives head_dim; "
                f"write a config.json with head_dim next to the weights (or is this not a Qwen3-style drafter?)"
            )
    q_rows, kv_rows = shape["q_proj_rows"], shape["kv_proj_rows"]
    heads = existing.get("num_attention_heads") if shape["head_dim"] is None else None
    if is_int(heads) and heads * head_dim != q_rows:
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
