# Fake of flash_attn.ops.triton.rotary (the module vLLM's ROCm rotary path and some drafters import).
def apply_rotary(
    x, cos, sin, seqlen_offsets=0, cu_seqlens=None, max_seqlen=None, interleaved=False, inplace=False, conjugate=False
):
    raise NotImplementedError("fake flash-attn: no kernels")
