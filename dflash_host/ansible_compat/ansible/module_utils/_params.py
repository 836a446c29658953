"""A module's parameters checked against its argument_spec, in ansible-core's order and with its messages:
aliases, mutually exclusive ones, required ones, fallbacks and defaults, types (and list elements), choices, the
required_* rules, then the names the spec does not know. Written for this project."""

from __future__ import annotations

import json
import os


class ParameterError(Exception):
    """What is wrong with the task's arguments, in ansible-core's words (the module fails with it)."""


TRUE = frozenset(("y", "yes", "on", "1", "true", "t", "1.0"))
FALSE = frozenset(("n", "no", "off", "0", "false", "f", "0.0"))


def validate(spec, given, name):
    """(parameters with defaults and types applied, the no_log values, {alias: option})."""
    spec = spec or {}
    params, aliases = _unaliased(spec, dict(given))
    unknown = sorted(k for k in params if k not in spec)
    for option, opts in spec.items():
        if params.get(option) is None:
            params[option] = _fallback_or_default(opts)
    missing = sorted(o for o, opts in spec.items() if opts.get("required") and params.get(o) is None)
    if missing:
        raise ParameterError("missing required arguments: " + ", ".join(missing))
    for option, opts in spec.items():
        params[option] = _typed(option, params[option], opts)
    no_log = {str(params[o]) for o, opts in spec.items() if opts.get("no_log") and params.get(o) not in (None, "")}
    if unknown:
        supported = ", ".join(sorted(spec)) + (f" ({', '.join(sorted(aliases))})" if aliases else "")
        raise ParameterError(f"Unsupported parameters for ({name}) module: {', '.join(unknown)}. "
                             f"Supported parameters include: {supported}.")
    return params, no_log, aliases


def _unaliased(spec, params):
    """Each alias's value under its option's name (the option's own name wins)."""
    aliases = {}
    for option, opts in spec.items():
        for alias in opts.get("aliases") or ():
            aliases[alias] = option
            if alias in params:
                value = params.pop(alias)
                params.setdefault(option, value)
    return params, aliases


def _fallback_or_default(opts):
    fallback = opts.get("fallback")
    if fallback:
        strategy, *rest = fallback
        args = rest[0] if rest else ()
        try:
            return strategy(*args) if not isinstance(args, dict) else strategy(**args)
        except LookupError:
            pass
    return opts.get("default")


def _typed(option, value, opts):
    """The value in the option's type, then checked against its choices."""
    if value is None:
        return None
    wanted = opts.get("type", "str")
    try:
        value = CONVERT[wanted](value) if isinstance(wanted, str) else wanted(value)
        if wanted == "list" and opts.get("elements"):
            value = [CONVERT[opts["elements"]](v) if isinstance(opts["elements"], str) else opts["elements"](v)
                     for v in value]
    except (TypeError, ValueError) as exc:
        raise ParameterError(f"argument '{option}' is of type {type(value)} and we were unable to convert to "
                             f"{wanted}: {exc}") from None
    choices = opts.get("choices")
    if choices is not None:
        bad = [v for v in value if v not in choices] if isinstance(value, list) else [value] if value not in choices else []
        if bad:
            raise ParameterError(f"value of {option} must be one of: {', '.join(map(str, choices))}, got: "
                                 f"{', '.join(map(str, bad))}")
    return value


def _to_bool(value):
    if isinstance(value, bool):
        return value
    key = value.lower() if isinstance(value, str) else str(value)
    if key in TRUE:
        return True
    if key in FALSE:
        return False
    raise TypeError(f"The value '{value}' is not a valid boolean.  Valid booleans include: "
                    f"{', '.join(repr(b) for b in sorted(TRUE | FALSE))}")


def _to_int(value):
    if isinstance(value, bool):
        raise TypeError(f"{type(value)} cannot be converted to an int")
    if isinstance(value, float) and not value.is_integer():
        raise TypeError(f"{type(value)} cannot be converted to an int")
    return int(value)


def _to_float(value):
    if isinstance(value, (bool, list, dict)):
        raise TypeError(f"{type(value)} cannot be converted to a float")
    return float(value)


def _to_str(value):
    if isinstance(value, (list, dict)):
        raise TypeError(f"{type(value)} cannot be converted to a str")
    return value if isinstance(value, str) else str(value)


def _to_list(value):
    if isinstance(value, list):
        return value
    if isinstance(value, str):
        return value.split(",")
    if isinstance(value, (int, float)):
        return [str(value)]
    raise TypeError(f"{type(value)} cannot be converted to a list")


def _to_dict(value):
    if isinstance(value, dict):
        return value
    if isinstance(value, str):
        if value.startswith("{"):
            return json.loads(value)
        return dict(part.split("=", 1) for part in value.replace(",", " ").split() if "=" in part)
    raise TypeError(f"{type(value)} cannot be converted to a dict")


def _to_path(value):
    return os.path.expanduser(os.path.expandvars(_to_str(value)))


def _to_jsonarg(value):
    return value.strip() if isinstance(value, str) else json.dumps(value)


CONVERT = {"str": _to_str, "int": _to_int, "float": _to_float, "bool": _to_bool, "list": _to_list,
           "dict": _to_dict, "path": _to_path, "raw": lambda v: v, "jsonarg": _to_jsonarg, "json": _to_jsonarg}


def check_rules(params, mutually_exclusive, required_together, required_one_of, required_if, required_by):
    """The spec's rules between options, each failing with ansible-core's message."""
    given = {k for k, v in params.items() if v is not None}
    for names in mutually_exclusive or ():
        if len(given & set(names)) > 1:
            raise ParameterError("parameters are mutually exclusive: " + "|".join(names))
    for names in required_together or ():
        if 0 < len(given & set(names)) < len(names):
            raise ParameterError("parameters are required together: " + ", ".join(names))
    for names in required_one_of or ():
        if not given & set(names):
            raise ParameterError("one of the following is required: " + ", ".join(names))
    for rule in required_if or ():
        _required_if(params, given, *rule)
    for option, needs in (required_by or {}).items():
        missing = [n for n in ([needs] if isinstance(needs, str) else needs) if n not in given]
        if option in given and missing:
            raise ParameterError(f"missing parameter(s) required by '{option}': {', '.join(missing)}")


def _required_if(params, given, key, value, needs, any_of=False):
    if params.get(key) != value:
        return
    missing = [n for n in needs if n not in given]
    if missing and (not any_of or len(missing) == len(needs)):
        count = "any" if any_of else "all"
        raise ParameterError(f"{key} is {value} but {count} of the following are missing: {', '.join(missing)}")
