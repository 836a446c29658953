"""A tiny random Qwen3 target and a tiny DFlash drafter (weights only, no config.json), made locally.

For the `local` host and the end-to-end tests: no download, no GPU. The serving environment's python
(torch, transformers, tokenizers come with vLLM) trains a byte-level BPE tokenizer on a few
sentences and writes a random float32 Qwen3 target (deep enough for the reference spacing of
target_layer_ids: 8 layers with k=2 fused layers gives [1, 5]) and a one-layer DFlash drafter in the
z-lab layout (fc.weight [H, H*k], hidden_norm, norm, layers.0.*). The drafter gets no config.json:
the drafter-config role derives it from the weights and the target. Idempotent: a marker file
beside the models records the recipe; same recipe = `ok`, no python started.

pair: `random` (default) makes the drafter disagree with the target almost always (acceptance ~0);
`agreeing` zeroes the target's final norm (`model.norm.weight`) and the drafter's (`norm.weight`) in the
generated safetensors: every hidden state reaching the shared lm_head is 0, so all logits are 0, greedy
picks token 0 on both sides and every draft is accepted (acceptance 1.0, every position equal). A test
fixture showing the top end of a drafter's speed-up, not a model anyone serves. The pair kind is part of
the recipe, so switching it regenerates both models.

The drafter is made for the target layers of the reference spacing (its fc fuses k of them; random weights
are trained for none, so these are its layers by construction): the result's `target_layer_ids`, which the
tiny-models role hands to drafter-config, so that they are given there, not guessed.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess

from dflash_host.host.files import atomic_write, read_json
from dflash_host.models.drafter_choices import reference_layer_ids
from dflash_host.module import Context, ModuleError, main

ARGS = {
    "state": {
        "type": "str",
        "default": "present",
        "choices": ["present", "absent"],
        "help": "present, or absent: remove models that tiny_models made (by its marker; others are never touched)",
    },
    "python": {
        "type": "path",
        "default": None,
        "var": "venv_python",
        "help": "the serving environment's python (with torch, transformers, tokenizers, safetensors); required "
        "for present",
    },
    "target_dir": {"type": "path", "required": True, "var": "target_model", "help": "the folder the target goes to"},
    "drafter_dir": {
        "type": "path",
        "required": True,
        "var": "drafter_model",
        "help": "the folder the drafter's weights go to",
    },
    "hidden_size": {
        "type": "int",
        "default": 64,
        "var": "tiny_models_hidden_size",
        "help": "hidden size of the target and the drafter",
    },
    "num_layers": {
        "type": "int",
        "default": 8,
        "var": "tiny_models_layers",
        "help": "target layers: deep enough for the reference spacing of target_layer_ids (k ids from 1 to N-3: "
        "N=8, k=2 gives [1, 5])",
    },
    "num_heads": {"type": "int", "default": 4, "help": "attention heads"},
    "num_kv_heads": {"type": "int", "default": 2, "help": "key/value heads (num_heads must be a multiple)"},
    "head_dim": {
        "type": "int",
        "default": 32,
        "var": "tiny_models_head_dim",
        "help": "attention head size: vLLM's CPU attention supports 32, 64, 80, 96, 112, 128, ... but not 16",
    },
    "intermediate_size": {"type": "int", "default": 128, "help": "MLP width"},
    "fused_layers": {
        "type": "int",
        "default": 2,
        "var": "tiny_models_fused_layers",
        "help": "target layers the drafter fuses (k: its fc.weight is [hidden, hidden * k])",
    },
    "draft_layers": {"type": "int", "default": 1, "help": "drafter layers"},
    "max_positions": {"type": "int", "default": 2048,
                      "help": "max_position_embeddings of both: the longest max_model_len a server of them takes (the "
                      "built-in speed workload's prompts reach ~400 tokens with this tokenizer, and 256 are asked for)"},
    "seed": {"type": "int", "default": 0, "help": "random seed"},
    "pair": {
        "type": "str",
        "default": "random",
        "choices": ["random", "agreeing"],
        "var": "tiny_pair",
        "help": "random: the drafter almost never agrees (acceptance ~0); agreeing: both final norms zeroed, so "
        "greedy picks token 0 on both sides and every draft is accepted (a test fixture for the speed-up's top end)",
    },
    "timeout_s": {"type": "float", "default": 600, "help": "limit for the generator, in seconds"},
}
# The arguments that decide what runs or which file, folder or address is touched: never built from what a
# host returned when the task runs on the control node (engine/run/trust.py).
CODE_ARGS = ("python", "target_dir", "drafter_dir")

MARKER = ".dflash-tiny-models.json"
RECIPE_VERSION = 1
CPU_HEAD_DIMS = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)

# Runs in the serving environment's python; its one argument is the recipe as JSON.
GENERATOR = r"""
import json, os, sys
r = json.loads(sys.argv[1])
import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

tdir, ddir = r["target_dir"], r["drafter_dir"]
os.makedirs(tdir, exist_ok=True)
os.makedirs(ddir, exist_ok=True)
torch.manual_seed(r["seed"])
specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|mask|>"]
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
corpus = ["The quick brown fox jumps over the lazy dog. " * 4,
          "Speculative decoding drafts several tokens and the target verifies them.",
          "Hello world! 0123456789 abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ"] * 20
tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=512, special_tokens=specials, show_progress=False,
                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
hf = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
hf.chat_template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
hf.save_pretrained(tdir)
H, L, NH, NKV, HD, I = (r["hidden_size"], r["num_layers"], r["num_heads"], r["num_kv_heads"], r["head_dim"],
                        r["intermediate_size"])
cfg = Qwen3Config(vocab_size=len(hf), hidden_size=H, intermediate_size=I, num_hidden_layers=L,
                  num_attention_heads=NH, num_key_value_heads=NKV, head_dim=HD,
                  max_position_embeddings=r["max_positions"], rms_norm_eps=1e-6, tie_word_embeddings=False,
                  bos_token_id=hf.eos_token_id, eos_token_id=hf.eos_token_id, pad_token_id=hf.pad_token_id)
target = Qwen3ForCausalLM(cfg).to(torch.float32)
if r["pair"] == "agreeing":  # zero final norm: every logit 0, greedy picks token 0 (the drafter's norm below too)
    with torch.no_grad():
        target.model.norm.weight.zero_()
target.save_pretrained(tdir, safe_serialization=True)
k = r["fused_layers"]
g = lambda *shape: torch.randn(*shape) * 0.02
one = lambda n: torch.ones(n)
sd = {"fc.weight": g(H, H * k), "hidden_norm.weight": one(H),
      "norm.weight": torch.zeros(H) if r["pair"] == "agreeing" else one(H)}
for i in range(r["draft_layers"]):
    p = "layers.%d." % i
    sd.update({p + "self_attn.q_proj.weight": g(NH * HD, H), p + "self_attn.k_proj.weight": g(NKV * HD, H),
               p + "self_attn.v_proj.weight": g(NKV * HD, H), p + "self_attn.o_proj.weight": g(H, NH * HD),
               p + "self_attn.q_norm.weight": one(HD), p + "self_attn.k_norm.weight": one(HD),
               p + "mlp.gate_proj.weight": g(I, H), p + "mlp.up_proj.weight": g(I, H),
               p + "mlp.down_proj.weight": g(H, I), p + "input_layernorm.weight": one(H),
               p + "post_attention_layernorm.weight": one(H)})
save_file({n: t.contiguous() for n, t in sd.items()}, os.path.join(ddir, "model.safetensors"), metadata={"format": "pt"})
print(json.dumps({"vocab_size": len(hf), "mask_token_id": hf.convert_tokens_to_ids("<|mask|>"),
                  "eos_token_id": hf.eos_token_id, "pair": r["pair"]}))
"""


def recipe_digest(r: dict) -> str:
    """The marker's digest of a recipe. The random pair is what every recipe made before tiny_pair existed: its
    digest leaves the key out, so an upgrade finds its models in place (no regeneration, no server restart)."""
    keyed = {k: v for k, v in r.items() if not (k == "pair" and v == "random")}
    return hashlib.sha256(json.dumps(keyed, sort_keys=True).encode()).hexdigest()


def recipe(args: dict) -> dict:
    """What the models are made from; validated (the names are the role's variables)."""
    r = {k: args[k] for k in ARGS if k not in ("state", "python", "timeout_s")}
    r["target_dir"] = os.path.abspath(r["target_dir"])
    r["drafter_dir"] = os.path.abspath(r["drafter_dir"])
    if r["target_dir"] == r["drafter_dir"]:
        raise ModuleError("tiny_models: target_dir and drafter_dir are the same folder; give each its own")
    for name in (
        "hidden_size",
        "num_layers",
        "num_heads",
        "num_kv_heads",
        "head_dim",
        "intermediate_size",
        "fused_layers",
        "draft_layers",
        "max_positions",
    ):
        if r[name] < 1:
            raise ModuleError(f"tiny_models: {name} is {r[name]}; it must be at least 1")
    if r["head_dim"] not in CPU_HEAD_DIMS:
        raise ModuleError(
            f"tiny_models: head_dim {r['head_dim']} is not supported by vLLM's CPU attention (the server would "
            f"answer /health and die on the first request); use one of {', '.join(map(str, CPU_HEAD_DIMS))}"
        )
    if r["num_heads"] % r["num_kv_heads"]:
        raise ModuleError(f"tiny_models: num_heads {r['num_heads']} is not a multiple of num_kv_heads {r['num_kv_heads']}")
    if r["fused_layers"] > 1 and r["num_layers"] < r["fused_layers"] + 3:
        raise ModuleError(
            f"tiny_models: a {r['num_layers']}-layer target is too shallow for the reference spacing of "
            f"{r['fused_layers']} target_layer_ids (needs at least {r['fused_layers'] + 3} layers)"
        )
    r["version"] = RECIPE_VERSION
    return r


def marker_path(target_dir: str) -> str:
    return os.path.join(os.path.dirname(os.path.abspath(target_dir)), MARKER)


def models_present(r: dict) -> bool:
    return os.path.isfile(os.path.join(r["target_dir"], "config.json")) and os.path.isfile(
        os.path.join(r["drafter_dir"], "model.safetensors")
    )


def remove(args: dict, ctx: Context) -> dict:
    """Remove the models only if the marker says tiny_models made them (a real model is never deleted)."""
    target, drafter = os.path.abspath(args["target_dir"]), os.path.abspath(args["drafter_dir"])
    marker = marker_path(target)
    has_marker = os.path.isfile(marker)
    made = (read_json(marker) or {}).get("recipe") or {}
    ours = [d for d in (target, drafter) if d in (made.get("target_dir"), made.get("drafter_dir")) and os.path.lexists(d)]
    if not ours and not has_marker:
        return {"changed": False, "msg": "no tiny models made by this tool here; nothing removed"}
    if not ctx.check:
        for d in ours:
            shutil.rmtree(d)
        if has_marker:
            os.unlink(marker)
    return {
        "changed": True,
        "msg": f"{'would remove' if ctx.check else 'removed'} the tiny models {', '.join(ours) or '(marker only)'}",
        "removed": ours,
    }


def clear_folders(r: dict, recorded: dict, marker: str) -> None:
    """Empty the model folders for a fresh generation, refusing folders with files tiny_models did not make.

    From scratch: a drafter config.json left from another recipe would no longer fit.
    """
    for folder in (r["target_dir"], r["drafter_dir"]):
        if not recorded and os.path.isdir(folder) and os.listdir(folder):
            raise ModuleError(
                f"tiny_models: {folder} holds files that tiny_models did not make (no {marker}); refusing to "
                "overwrite them. Point target_model/drafter_model elsewhere or turn tiny_models off"
            )
    for folder in (r["target_dir"], r["drafter_dir"]):
        if os.path.isdir(folder):
            shutil.rmtree(folder)


def generate(python: str, r: dict, timeout_s: float) -> dict:
    """Run GENERATOR in the serving environment's python; what it printed last (vocab_size, mask_token_id, ...)."""
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    try:
        res = subprocess.run(
            [python, "-c", GENERATOR, json.dumps(r)],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=env,
        )
    except subprocess.TimeoutExpired:
        raise ModuleError(f"tiny_models: the generator ran longer than {timeout_s:g} s; raise timeout_s")
    if res.returncode != 0:
        tail = " | ".join(res.stderr.strip().splitlines()[-4:])
        raise ModuleError(
            f"tiny_models: generating with {python} failed (exit {res.returncode}): {tail}; "
            "the serving environment needs torch, transformers, tokenizers and safetensors"
        )
    for line in reversed(res.stdout.strip().splitlines()):
        try:
            made = json.loads(line)
        except ValueError:
            continue
        if isinstance(made, dict):
            return made
    return {}


def run(args: dict, ctx: Context) -> dict:
    if args["state"] == "absent":
        return remove(args, ctx)
    if not args["python"]:
        raise ModuleError("tiny_models: python is required (the serving environment's python, venv_python)")
    r = recipe(args)
    marker = marker_path(r["target_dir"])
    digest = recipe_digest(r)
    recorded = read_json(marker) or {}
    where = {"target_dir": r["target_dir"], "drafter_dir": r["drafter_dir"],
             "target_layer_ids": reference_layer_ids(r["num_layers"], r["fused_layers"])}
    if recorded.get("digest") == digest and models_present(r):
        msg = f"tiny models ({r['pair']} pair) are in place ({r['target_dir']}, {r['drafter_dir']})"
        return {"changed": False, "msg": msg, **where, **recorded.get("made", {})}
    if ctx.check:
        return {"changed": True, "msg": f"would generate a tiny target in {r['target_dir']} and drafter in {r['drafter_dir']}"}
    python = args["python"]
    if not os.path.exists(python):
        raise ModuleError(f"tiny_models: python {python} does not exist; the venv role builds the serving environment first")
    clear_folders(r, recorded, marker)
    ctx.say("generating a tiny Qwen3 target and DFlash drafter")
    made = generate(python, r, args["timeout_s"])
    atomic_write(marker, (json.dumps({"digest": digest, "recipe": r, "made": made}, indent=1) + "\n").encode())
    return {
        "changed": True,
        "msg": f"generated a tiny target ({r['num_layers']} layers, hidden {r['hidden_size']}) and a DFlash "
        f"drafter (k={r['fused_layers']}, {r['pair']} pair) without config.json; mask_token_id {made.get('mask_token_id')}",
        **where,
        **made,
        "diff": {"before": {"recipe": recorded.get("recipe")}, "after": {"recipe": r}},
    }


if __name__ == "__main__":
    main(ARGS, run)
