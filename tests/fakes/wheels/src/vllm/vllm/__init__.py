# Fake vllm: stands in for the import path that breaks when a flash_attn without flash_attn.ops is
# present on Ampere/Hopper (vLLM's rotary embedding takes flash_attn's triton kernel when flash_attn is
# importable). It models that failure only: leave it out of tests that model a Blackwell host.
import importlib.util

__version__ = "0.26.0"

if importlib.util.find_spec("flash_attn") is not None:
    from flash_attn.ops.triton.rotary import apply_rotary  # noqa: F401
