"""Which modules and engine actions exist, and their argument tables (read without importing modules)."""

from __future__ import annotations

import ast
import functools
import hashlib
import marshal
import sys
from dataclasses import dataclass
from pathlib import Path

from dflash_host.shared_args import UnknownInclude, resolve_entries
from engine.cache import CACHE, write_atomically
from engine.errors import UserError

ARGS_CACHE = CACHE / "module-args"  # each module's ARGS literal, keyed by its path, time and size

PROJECT_ROOT = Path(__file__).resolve().parents[2]
LIBRARY = PROJECT_ROOT / "library"

# Actions the engine performs on the control node (no module runs for them on the host, or the
# engine prepares what the host module receives).
ENGINE_ACTIONS: dict[str, dict | None] = {
    "assert": {"that": {"type": "raw", "required": True}, "fail_msg": {"type": "str"}, "msg": {"type": "str"},
               "success_msg": {"type": "str"}, "quiet": {"type": "bool", "default": False}},
    "fail": {"msg": {"type": "str", "default": "failed as requested"}},
    "debug": {"msg": {"type": "raw"}, "var": {"type": "str"}, "verbosity": {"type": "int", "default": 0}},
    "set_fact": None,  # any names
    # name/hostname/host, groups/groupname/group, any other key a host variable (engine/run/actions/control.py)
    "add_host": None,
    "group_by": {"key": {"type": "str", "required": True}, "parents": {"type": "raw"}},
    # `- meta: flush_handlers` (a string in the playbook, read as {action: ...}); the runner acts on it
    "meta": {"action": {"type": "str", "required": True, "choices": ["flush_handlers", "reset_connection", "end_host",
                                                                     "end_batch", "end_play", "noop",
                                                                     "clear_host_errors"]}},
    # the include itself (engine/playbook/model.py Include): one ok result per host it reaches, as Ansible's "included"
    "include_tasks": {"file": {"type": "str", "required": True}},
    "include_role": {"name": {"type": "str", "required": True}, "tasks_from": {"type": "str"}},
    # variables from control-node files (engine/run/actions/vars_files.py); `- include_vars: FILE` is `file`
    "include_vars": {"file": {"type": "str"}, "dir": {"type": "str"}, "name": {"type": "str"},
                     "depth": {"type": "int", "default": 0}, "files_matching": {"type": "str"},
                     "ignore_files": {"type": "raw"}, "extensions": {"type": "raw"},
                     "ignore_unknown_extensions": {"type": "bool", "default": False},
                     "hash_behaviour": {"type": "str", "choices": ["replace", "merge"]}},
    "pause": {"minutes": {"type": "raw"}, "seconds": {"type": "raw"}, "prompt": {"type": "str"},
              "echo": {"type": "bool", "default": True}},
    "template": {
        "src": {"type": "str", "required": True},
        "dest": {"type": "path", "required": True},
        "mode": {"type": "str"},
        "owner": {"type": "str"},
        "group": {"type": "str"},
        "backup": {"type": "bool", "default": False},
        "force": {"type": "bool", "default": True},
        "validate": {"type": "str"},
        "follow": {"type": "bool", "default": False},
        "attributes": {"type": "str"},
        "trim_blocks": {"type": "bool", "default": True},
        "lstrip_blocks": {"type": "bool", "default": False},
        "newline_sequence": {"type": "str", "default": "\n"},
        "output_encoding": {"type": "str", "default": "utf-8"},
        "block_start_string": {"type": "str"}, "block_end_string": {"type": "str"},
        "variable_start_string": {"type": "str"}, "variable_end_string": {"type": "str"},
        "comment_start_string": {"type": "str"}, "comment_end_string": {"type": "str"},
    },
}


# The engine actions' code arguments (what a module's CODE_ARGS declares: engine/run/trust.py).
ENGINE_CODE_ARGS: dict[str, tuple[str, ...]] = {
    "assert": (), "fail": (), "debug": (), "set_fact": (), "meta": (), "group_by": (),
    "add_host": ("name", "hostname", "host", "ansible_host", "ansible_port", "ansible_user", "ansible_connection"),
    "include_tasks": ("file",), "include_role": ("name", "tasks_from"),
    "include_vars": ("file", "dir", "files_matching", "ignore_files"),
    "template": ("src", "dest", "validate"), "pause": (),
}


@dataclass
class ModuleSpec:
    name: str
    path: Path | None  # None for engine actions
    args: dict | None  # None = accepts anything
    code: tuple[str, ...] | None = None  # CODE_ARGS: the arguments that decide what runs or which file is touched
    user: bool = False  # a playbook's own Ansible module (engine/playbook/user_modules.py): no ARGS table


_MODULES: dict[str, ModuleSpec] | None = None


def _read_args_literal(path: Path) -> tuple[dict, tuple[str, ...]]:
    """ARGS and CODE_ARGS of a module, read without importing it (modules import host-only packages); from the
    cache while the file keeps its time and size (as Python's own bytecode cache), else parsed and cached."""
    st = path.stat()
    stamp = (sys.version, str(path), st.st_mtime_ns, st.st_size)
    cache = ARGS_CACHE / f"{path.stem}-{hashlib.sha256(str(path).encode()).hexdigest()[:16]}.bin"
    cached = _cached_args(cache, stamp)
    if cached is not None:
        return cached
    args = _parse_args_literal(path)
    _cache_args(cache, stamp, args)
    return args


def _parse_args_literal(path: Path) -> tuple[dict, tuple[str, ...]]:
    """Parsing a module costs 3-5 ms (a playbook's modules about 20 ms of every run's start): hence the cache."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = {}
    for node in tree.body:
        for name in ("ARGS", "CODE_ARGS"):
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
                try:
                    found[name] = ast.literal_eval(node.value)
                except ValueError:
                    kind = "dict" if name == "ARGS" else "tuple"
                    raise UserError(f"{path}: {name} must be a literal {kind} (the engine reads it without importing)") from None
    if not isinstance(found.get("ARGS"), dict):
        raise UserError(f"{path}: a module must define ARGS = {{...}}")
    code = found.get("CODE_ARGS")
    if not (isinstance(code, tuple) and all(isinstance(c, str) for c in code)):
        raise UserError(f"{path}: a module must declare CODE_ARGS = (...), the arguments that decide what runs or which "
                        "file is touched (a tuple of names, empty when none does): engine/run/trust.py")
    return found["ARGS"], code


def _cached_args(cache: Path, stamp: tuple) -> tuple | None:
    try:
        data = marshal.loads(cache.read_bytes())  # noqa: S302 - the user's own cache, written below
    except (OSError, EOFError, ValueError, TypeError):
        return None
    if isinstance(data, tuple) and len(data) == 2 and data[0] == stamp and isinstance(data[1], tuple):
        return data[1]
    return None


def _cache_args(cache: Path, stamp: tuple, args: tuple) -> None:
    """Best effort: a cache that cannot be written only costs the parse next time."""
    try:
        ARGS_CACHE.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_atomically(str(cache), marshal.dumps((stamp, args)))
    except (OSError, ValueError):
        pass


def modules() -> dict[str, ModuleSpec]:
    global _MODULES
    if _MODULES is None:
        found = {}
        for p in sorted(LIBRARY.glob("*.py")):
            if not p.name.startswith("_"):  # library/__init__.py (and any _*.py) is no task module
                found[p.stem] = ModuleSpec(p.stem, p, None)
        for name, spec in ENGINE_ACTIONS.items():
            found[name] = ModuleSpec(name, None, spec, ENGINE_CODE_ARGS[name])
        _MODULES = found
    return _MODULES


def add_user_module(name: str, path: Path) -> None:
    """A playbook's own module (a `library/` file beside a playbook or in a role), known from now on unless the
    name is taken: ours, or an earlier library's (Ansible's first-found)."""
    modules().setdefault(name, ModuleSpec(name, path, None, None, user=True))


def forget_user_modules() -> None:
    """A new playbook load starts with our modules only."""
    for name in [n for n, spec in modules().items() if spec.user]:
        del modules()[name]


def is_user_module(name: str) -> bool:
    spec = modules().get(name)
    return spec is not None and spec.user


@functools.cache  # read for every task on every host; the tables do not change during a run
def linked_vars(name: str) -> dict[str, str]:
    """{argument: variable} for a module's arguments whose ARGS entry names a variable (`"var": "vllm_port"`).

    A task that leaves such an argument out gets the variable's value when the variable is defined (inventory,
    group_vars, -e, a role's defaults), else the module's default: the default is written once, in ARGS."""
    spec = module_args_spec(name) or {}
    return {arg: opt["var"] for arg, opt in spec.items() if isinstance(opt, dict) and isinstance(opt.get("var"), str)}


def module_args_spec(name: str) -> dict | None:
    spec = modules()[name]
    if spec.args is None and spec.path is not None and not spec.user:  # a user module checks its own arguments
        args, spec.code = _read_args_literal(spec.path)
        try:
            spec.args = resolve_entries(args)
        except UnknownInclude as exc:
            raise UserError(f"{spec.path}: ARGS {exc.args[0]}; fix the include") from None
    return spec.args


def code_args(name: str) -> tuple[str, ...]:
    """The module's declared code arguments (CODE_ARGS): what decides the program, the interpreter, the
    environment, or the file, folder or address it touches."""
    spec = modules()[name]
    module_args_spec(name)
    return spec.code or ()
