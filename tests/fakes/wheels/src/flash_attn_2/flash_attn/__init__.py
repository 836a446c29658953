# Fake of flash-attn 2.x: same package layout as the real one, no CUDA code.
__version__ = "2.8.3"

from flash_attn.flash_attn_interface import flash_attn_func, flash_attn_varlen_func  # noqa: F401
