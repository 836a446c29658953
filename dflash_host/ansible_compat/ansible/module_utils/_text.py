"""The older name of the text converters (`from ansible.module_utils._text import to_text`)."""

from .common.text.converters import to_bytes, to_native, to_text

__all__ = ["to_bytes", "to_native", "to_text"]
