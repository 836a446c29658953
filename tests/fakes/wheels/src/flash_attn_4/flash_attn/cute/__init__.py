from flash_attn.cute.interface import flash_attn_func, flash_attn_varlen_func  # noqa: F401

__version__ = "4.0.0b36"
