"""to_bytes / to_text / to_native as a module expects them: text and bytes converted with an encoding and an
error rule, anything else through str() (`nonstring="simplerepr"`), returned as is ("passthru"), or refused
("strict"), or made empty ("empty")."""

from __future__ import annotations

SURROGATE_RULES = ("surrogate_or_strict", "surrogate_or_replace", "surrogate_then_replace")


def _errors(errors: str | None) -> str:
    """Python's error handler for the module_utils names: the surrogate_* ones use surrogateescape, falling back
    (surrogate_or_replace, surrogate_then_replace) to replace where surrogates cannot be encoded."""
    if errors in SURROGATE_RULES or errors is None:
        return "surrogateescape"
    return errors


def _nonstring(obj, nonstring: str, convert):
    if nonstring == "simplerepr":
        try:
            text = str(obj)
        except UnicodeError:
            text = repr(obj)
        return convert(text)
    if nonstring == "passthru":
        return obj
    if nonstring == "empty":
        return convert("")
    if nonstring == "strict":
        raise TypeError("obj must be a string type")
    raise TypeError(f"Invalid value {nonstring} for to_bytes' or to_text's nonstring parameter")


def to_bytes(obj, encoding: str = "utf-8", errors: str | None = None, nonstring: str = "simplerepr"):
    """`obj` as bytes: text encoded (a text that cannot be encoded strictly falls back to `replace` under the
    surrogate_or_replace and surrogate_then_replace rules)."""
    if isinstance(obj, bytes):
        return obj
    if isinstance(obj, str):
        try:
            return obj.encode(encoding, _errors(errors))
        except UnicodeEncodeError:
            if errors in ("surrogate_or_replace", "surrogate_then_replace", None):
                return obj.encode(encoding, "replace")
            raise
    return _nonstring(obj, nonstring, lambda text: to_bytes(text, encoding, errors))


def to_text(obj, encoding: str = "utf-8", errors: str | None = None, nonstring: str = "simplerepr"):
    """`obj` as text: bytes decoded (undecodable bytes kept as surrogates under the surrogate_* rules)."""
    if isinstance(obj, str):
        return obj
    if isinstance(obj, (bytes, bytearray)):
        return bytes(obj).decode(encoding, _errors(errors))
    return _nonstring(obj, nonstring, lambda text: text)


to_native = to_text  # Python 3: the native string is text
