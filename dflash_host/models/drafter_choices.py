"""The DFlash fields no tensor shape decides: target_layer_ids, mask_token_id, block_size.

Each is taken from the task's argument, else from the drafter's existing config.json, else (ids and
block size only) a reference rule; each choice comes with its rule (RULE_TEXT) so the result and the
messages say where a value came from. Used by drafter_config.
"""

from __future__ import annotations

import json

from dflash_host.models.drafter_shape import is_int
from dflash_host.module import ModuleError

DEFAULT_BLOCK_SIZE = 16  # block_size when neither the task nor an existing config gives one
MAX_BLOCK_SIZE = 1024  # DFlash drafts block_size - 1 tokens a step; published drafters use 8 or 16

RULE_TEXT = {
    "given": "given",
    "existing": "from the existing config",
    "reference": "guessed by the reference spacing",
    "default": "the default",
}


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
    ids: list[int] = []
    for item in value if isinstance(value, (list, tuple)) else [value]:
        number = _whole_number(item)
        if number is None:
            ids = []
            break
        ids.append(number)
    if not ids:
        raise ModuleError(f"target_layer_ids {value!r} is not a non-empty list of integers; write e.g. [1, 16, 31]")
    return ids


def _whole_number(item) -> int | None:
    """A layer id as an int ("16" and 16.0 are 16); None for a bool, 1.5, YAML's .inf or "x"."""
    if isinstance(item, bool):
        return None
    try:
        number = int(str(item).strip()) if isinstance(item, str) else int(item)
    except (TypeError, ValueError, OverflowError):  # OverflowError: YAML's .inf
        return None
    if not isinstance(item, str) and item != number:
        return None
    return number


def dflash_section(config: dict) -> dict:
    """A drafter config's dflash_config object ({} when absent or not an object)."""
    section = config.get("dflash_config")
    return section if isinstance(section, dict) else {}


def choose_layer_ids(given, existing: dict, n_target: int, k: int) -> tuple:
    """(ids, rule): the argument, else the existing config's dflash_config, else the reference spacing."""
    if given is not None:
        return list(given), "given"
    for ids in (dflash_section(existing).get("target_layer_ids"), existing.get("target_layer_ids")):
        if ids is not None:
            return parse_layer_ids(ids if isinstance(ids, list) else [str(ids)]), "existing"
    return reference_layer_ids(n_target, k), "reference"


def choose_mask_token_id(given, existing: dict) -> tuple:
    """(id, rule) or (None, None) when neither the argument nor an existing config has one."""
    if given is not None:
        return given, "given"
    for value in (dflash_section(existing).get("mask_token_id"), existing.get("mask_token_id")):
        if is_int(value):
            return value, "existing"
    return None, None


def choose_block_size(given, existing: dict) -> tuple:
    """(size, rule, layout) where layout lists where it is written: "top" (older) and/or "nested" (newer)."""
    dflash = dflash_section(existing)
    layout = [place for place, holder in (("top", existing), ("nested", dflash)) if "block_size" in holder]
    if not layout:
        layout = ["top"]
    if given is not None:
        return given, "given", layout
    for value in (dflash.get("block_size"), existing.get("block_size")):
        if is_int(value):
            return value, "existing", layout
    return DEFAULT_BLOCK_SIZE, "default", layout


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


def check_mask_token_id(mask, rule, vocab: int, dest: str, target_where: str) -> None:
    """A mask token id must be known and inside the target's vocabulary."""
    if mask is None:
        raise ModuleError(
            f"{dest}: mask_token_id is needed and not known: no argument and no existing config gives it. It is "
            f"the id of the mask token the drafter was trained with, from the drafter's training setup or model "
            f"card (e.g. 151669 for Qwen3 drafters, 248070 or 248077 for Qwen3.5/3.6 ones); set the role "
            f"variable drafter_mask_token_id (module argument mask_token_id)"
        )
    if not 0 <= mask < vocab:
        raise ModuleError(
            f"mask_token_id {mask} ({RULE_TEXT[rule]}) is outside the target's vocabulary "
            f"0..{vocab - 1} ({target_where}); use the mask id from the drafter's model card"
        )


def check_block_size(block_size: int, rule: str) -> None:
    """A block holds the bonus token and at least one mask, and no more than any drafter drafts."""
    if block_size < 2:
        raise ModuleError(f"block_size {block_size} ({RULE_TEXT[rule]}) must be at least 2 (the bonus token and one mask)")
    if block_size > MAX_BLOCK_SIZE:
        raise ModuleError(
            f"block_size {block_size} ({RULE_TEXT[rule]}) is more than {MAX_BLOCK_SIZE}; DFlash drafters use 8 "
            f"or 16: give the drafter's own block_size (role variable drafter_block_size)"
        )
