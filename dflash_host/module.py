"""The module contract: ModuleError, Context, argument checking, and how a module call runs.

Every task module in library/ takes its contract from here, on the host (the worker imports this
package from the runtime the engine ships) and by hand (`python3 -m library.NAME ARGS.json` from the
repository root); the control node checks task arguments with the same check_args. Standard library
only: a host needs nothing but python3 (3.9+).
"""

from __future__ import annotations

import json
import os
import sys

from dflash_host.shared_args import UnknownInclude, resolve_entries

TYPE_CHECKING = False  # true for mypy; typing itself is never imported on the host (its import costs every run)
if TYPE_CHECKING:  # annotations only
    from typing import Any, Callable


class ModuleError(Exception):
    """A failure a person can act on: what is wrong, where, and the fix. Never a traceback."""

    def __init__(self, msg: str, **data: Any) -> None:
        super().__init__(msg)
        self.msg = msg
        self.data = data


class Context:
    """What a module knows about the run besides its arguments."""

    def __init__(self, check: bool = False, diff: bool = False, warnings: list | None = None,
                 progress: Callable[[str], None] | None = None) -> None:
        self.check = check  # report what would change, change nothing
        self.diff = diff  # include before/after in the result
        self.warnings = [] if warnings is None else warnings
        self.progress = progress  # live progress for long steps

    def warn(self, msg: str) -> None:
        self.warnings.append(msg)

    def say(self, msg: str) -> None:
        if self.progress:
            self.progress(msg)


_TYPES = {
    "str": (str,),
    "path": (str,),
    "int": (int,),
    "float": (int, float),
    "bool": (bool,),
    "list": (list, tuple),
    "dict": (dict,),
    "raw": (object,),
}

_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}


def _coerce(name: str, value: Any, typ: str, module: str) -> Any:
    """Accept the forms YAML and `-e key=value` produce (strings for numbers and booleans)."""
    if value is None:
        return None
    if typ == "bool" and isinstance(value, str):
        low = value.strip().lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
    if typ == "int" and isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            pass
    if typ == "float" and isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            pass
    if typ == "list" and isinstance(value, str):
        return [value]
    if typ in ("str", "path") and isinstance(value, (bool, int, float)):  # Ansible's check_type_str converts them
        value = str(value)
    ok = _TYPES[typ]
    if typ in ("int", "float") and isinstance(value, bool):
        ok = ()
    if not isinstance(value, ok):
        raise ModuleError(
            f"module '{module}': argument '{name}' must be {typ}, got {type(value).__name__} "
            f"{value!r}; fix the value in the task's arguments"
        )
    if typ == "path" and isinstance(value, str):  # always a str here (checked above); said again for mypy
        value = os.path.expanduser(value)
    return value


def check_args(spec: dict, args: dict, module: str) -> dict:
    """Validate args against a module's ARGS spec (its shared entries included); return them with defaults filled in."""
    try:
        spec = resolve_entries(spec)
    except UnknownInclude as exc:
        raise ModuleError(f"module '{module}': {exc.args[0]}") from None
    unknown = sorted(set(args) - set(spec))
    if unknown:
        raise ModuleError(f"module '{module}': unknown argument(s) {', '.join(unknown)}; it accepts: {', '.join(sorted(spec))}")
    out = {}
    for name, opts in spec.items():
        if name in args and args[name] is not None:
            value = _coerce(name, args[name], opts.get("type", "str"), module)
        elif opts.get("required"):
            raise ModuleError(f"module '{module}': missing required argument '{name}'")
        else:
            value = opts.get("default")
        choices = opts.get("choices")
        if choices is not None and value is not None and value not in choices:
            raise ModuleError(f"module '{module}': argument '{name}' is {value!r}; choose one of: {', '.join(map(str, choices))}")
        out[name] = value
    return _fold_aliases(spec, args, out, module)


def _fold_aliases(spec: dict, args: dict, out: dict, module: str) -> dict:
    """An entry with `"alias_of": OPTION` (Ansible's aliases: lineinfile's dest for path) gives its value to
    OPTION and is left out of the result; both given, with different values, is refused (Ansible warns and takes
    the alias's)."""
    given = {name: name for name in spec if args.get(name) is not None}  # option -> who set it
    for name, opts in spec.items():
        option = opts.get("alias_of")
        if option is None:
            continue
        value = out.pop(name)
        if value is None or option not in out:  # out lacks it when one entry is checked alone (preflight's types)
            continue
        if option in given and out[option] != value:
            raise ModuleError(f"module '{module}': '{given[option]}' and '{name}' (both '{option}') are given, as "
                              f"{out[option]!r} and {value!r}; keep one of them")
        out[option], given[option] = value, name
    return out


def execute(spec: dict, run: Callable, args: dict, ctx: Context, module: str) -> dict:
    """Run one module call under the contract: validated args in, a result dict out."""
    try:
        checked = check_args(spec, args, module)
        result = run(checked, ctx) or {}
    except ModuleError as exc:
        result = dict(exc.data)
        result.update(failed=True, changed=False, msg=exc.msg)
    result.setdefault("changed", False)
    result.setdefault("failed", False)
    result.setdefault("msg", "")
    if ctx.warnings:
        result["warnings"] = list(ctx.warnings) + list(result.get("warnings", []))
    return result


def main(spec: dict, run: Callable) -> None:
    """Entry point for `python3 -m library.NAME ARGS.json [--check] [--diff]`: prints the JSON result."""
    module = os.path.splitext(os.path.basename(sys.argv[0]))[0]
    argv = [a for a in sys.argv[1:] if not a.startswith("--")]
    flags = {a for a in sys.argv[1:] if a.startswith("--")}
    if len(argv) != 1:
        print(f"usage: python3 -m library.{module} ARGS.json [--check] [--diff] (from the repository root)", file=sys.stderr)
        sys.exit(2)
    try:
        with open(argv[0], encoding="utf-8") as fh:
            args = json.load(fh)
    except (OSError, ValueError) as exc:
        print(json.dumps({"failed": True, "changed": False, "msg": f"{argv[0]}: cannot read args: {exc}"}))
        sys.exit(1)
    ctx = Context(check="--check" in flags, diff="--diff" in flags)
    result = execute(spec, run, args, ctx, module)
    print(json.dumps(result, indent=2, sort_keys=True, default=str))
    sys.exit(1 if result.get("failed") else 0)
