# Fake of flash-attn-4: like the real one, a flash_attn package extended with pkgutil so that fa2 and
# fa4 can be co-installed; it has flash_attn/cute and no flash_attn/ops.
from pkgutil import extend_path

__path__ = extend_path(__path__, __name__)
