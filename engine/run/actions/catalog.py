"""Which tasks the engine runs itself, and when: the one table of engine actions.

Each action is a function that takes an ActionCall (engine/run/actions/call.py) and returns a result dict like a
module's. Adding one: write the function in control.py (it touches no host) or files.py (it prepares what a host
module receives), name it in ACTIONS, and give its argument table in ENGINE_ACTIONS
(engine/playbook/modulespec.py). An action whose imports are heavy is named by module and imported at its first
call (the models relay's HTTP client costs ~10 ms a run that never uses it).
"""

from __future__ import annotations

import importlib
from typing import Callable

from engine.run.actions.call import ActionCall
from engine.run.actions.control import add_host, assert_, debug, fail, group_by, included, meta, pause, set_fact
from engine.run.actions.files import copy_from_control_node, template, unarchive_from_control_node
from engine.run.actions.vars_files import include_vars

Action = Callable[[ActionCall], dict]


def imported_at_first_call(module: str, function: str) -> Action:
    """The action `function` of `module`, imported when a play first calls it."""

    def first_call(call: ActionCall) -> dict:
        return getattr(importlib.import_module(module), function)(call)

    return first_call


ACTIONS: dict[str, Action] = {
    "add_host": add_host,
    "group_by": group_by,
    "assert": assert_,
    "debug": debug,
    "fail": fail,
    "set_fact": set_fact,
    "meta": meta,
    "include_tasks": included,
    "include_role": included,
    "include_vars": include_vars,
    "template": template,
    "copy": copy_from_control_node,
    "unarchive": unarchive_from_control_node,
    "pause": pause,
    "models": imported_at_first_call("engine.run.actions.models", "models_via_control_node"),
}

# Engine actions that never touch a host: delegating one connects to no delegate (set_fact's delegate_facts
# only chooses whose variables it sets).
LOCAL_ACTIONS = ("add_host", "group_by", "assert", "debug", "fail", "include_role", "include_tasks", "include_vars", "meta", "pause",
                 "set_fact")


def relayed(args: dict) -> bool:
    """`models` is the engine's when the control node carries the files: models_via control_node, or an
    air-gapped source folder (engine/run/actions/models.py); else it is the host module alone."""
    return args.get("state", "present") == "present" and args.get("phase", "fetch") == "fetch" and (
        args.get("via") == "control_node" or bool(args.get("source_dir")))


def copies_from_control_node(args: dict) -> bool:
    """copy is the engine's with a `src:` on the control node; without one it is the host module alone."""
    return "src" in args and not args.get("remote_src")


def unarchives_from_control_node(args: dict) -> bool:
    """unarchive is the engine's when src is a control-node file (remote_src false, or copy not false)."""
    return not args.get("remote_src") and args.get("copy") is not False


CLAIMS: dict[str, Callable[[dict], bool]] = {"models": relayed, "copy": copies_from_control_node,
                                             "unarchive": unarchives_from_control_node}


def handles(module: str, args: dict) -> bool:
    """True when the engine runs this task itself."""
    return module in ACTIONS and CLAIMS.get(module, lambda _args: True)(args)
