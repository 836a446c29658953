"""The lines ansible-playbook's default output callback prints, made from this engine's results: scripts grep
them (`ok: [h]`, `fatal: [h]: FAILED! => {...}`, `RUNNING HANDLER [r : name]`, `ok=3`), so their words, order
and spacing are Ansible's. Pure text: engine/report/console.py decides when and where each is written."""

from __future__ import annotations

import json
import os
import re
from typing import Any

from engine.run.results import TaskResult

_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
CENSORED = "the output has been hidden due to the fact that 'no_log: true' was specified for this result"
NO_LOG_MSG = "(output hidden: no_log)"  # engine/run/task_executor.py: the msg of a no_log task's result
# Keys of a result that are this engine's bookkeeping, never part of what Ansible shows
_INTERNAL = frozenset({"failure_accepted", "include", "include_args", "meta", "warnings", "exception",
                       "deprecations", "failed", "skipped", "diff", "invocation"})
_DEBUG_HIDDEN = frozenset({"changed", "skip_reason", "ansible_loop_var", "ansible_index_var", "ansible_loop"})
INCLUDES = frozenset({"include_tasks", "include_role", "include"})
# meta actions Ansible's linear strategy runs once for all hosts (a META line once per task); the others per host
_META_PER_HOST = frozenset({"noop", "reset_connection", "end_host", "role_complete", "flush_handlers", "end_role"})


def clean_text(text: Any) -> str:
    """Host text on one console line: control characters escaped, so it cannot move the cursor or forge lines."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", str(text))


def banner(title: str, columns: int) -> str:
    """`TITLE ****`: Ansible's banner, its stars filling the line to `columns` (at least three)."""
    return f"{title} {'*' * max(3, columns - len(title))}"


def host_label(res: TaskResult) -> str:
    return f"{res.host} -> {res.delegated_to}" if res.delegated_to and res.delegated_to != res.host else res.host


def dump(data: Any, indent: int | None = None) -> str:
    """A result as Ansible's callback writes it: JSON, keys sorted, non-ASCII kept, control characters escaped."""
    return clean_text(json.dumps(data, indent=indent, sort_keys=True, ensure_ascii=False, default=str))


def _is_debug_var(result: dict) -> bool:
    """debug's `var` form: besides its own fields the result holds the expression's value under its text."""
    own = {"changed", "failed", "msg", "skipped", "warnings", "skip_reason", "skipped_reason", "false_condition",
           "ansible_loop_var", "ansible_index_var", "ansible_loop", result.get("ansible_loop_var", "")}
    return any(k not in own and not k.startswith("_") for k in result)


def shown(result: dict, module: str, no_log: bool = False) -> dict:
    """What Ansible's callback shows of a result: its data less the engine's bookkeeping; debug only its msg (or
    its var's value); a skipped result without the engine's own skip message; a no_log one censored."""
    if no_log:
        return {"censored": CENSORED, "changed": bool(result.get("changed"))}
    data = {k: v for k, v in result.items() if k not in _INTERNAL and not k.startswith("_")}
    if result.get("skipped"):
        msg = str(data.get("msg", ""))
        if msg.startswith("skipped") or msg == data.get("skipped_reason"):
            data.pop("msg")
        if msg.startswith("skipped: ") and "false_condition" not in data and "skipped_reason" not in data:
            data["false_condition"] = msg.removeprefix("skipped: ").removeprefix("condition is false: ")
    elif module == "set_fact":
        data.pop("msg", None)  # the engine's note; Ansible's set_fact returns none
    if module == "debug":
        if result.get("skipped"):
            data = {k: v for k, v in data.items() if k not in _DEBUG_HIDDEN}
        elif _is_debug_var(result):
            data = {k: v for k, v in data.items() if k not in _DEBUG_HIDDEN and k != "msg"}
        elif "msg" in data:
            data = {"msg": data["msg"]}
    return data


def verbose_always(res: TaskResult) -> bool:
    """debug and assert show their result without -v (Ansible's _ansible_verbose_always)."""
    return res.module in ("debug", "assert") and res.status != "skipped"


def item_label(item: dict, no_log: bool = False) -> str:
    if no_log:
        return "(censored due to no_log)"
    name = item.get("ansible_loop_var", "item")
    return clean_text(item.get("_ansible_item_label", item.get(name, item.get("item"))))


def _item_status(item: dict) -> str:
    if item.get("failed") and not item.get("failure_accepted"):
        return "failed"
    if item.get("skipped"):
        return "skipped"
    return "changed" if item.get("changed") else "ok"


def error_line(res: TaskResult, msg: str) -> str:
    """Ansible 2.19's `[ERROR]: Task failed: ...` line before a failure (an action on the control node, or a
    module on the host); a message that already says so is kept as it is. Its own lines are indented, so that
    none of a host's text starts like a status line."""
    msg = clean_text(msg).replace("\n", "\n    ")
    if msg.startswith("Task failed"):
        return f"[ERROR]: {msg}"
    kind = "Action" if res.module in ACTIONS else "Module"
    return f"[ERROR]: Task failed: {kind} failed{': ' + msg if msg else '.'}"


ACTIONS = frozenset({"fail", "assert", "debug", "set_fact", "set_stats", "include_vars", "add_host", "group_by",
                     "pause", "meta", "template", "copy", "include_tasks", "include_role", "import_tasks",
                     "import_role", "wait_for_connection", "fetch", "unarchive", "script", "assemble"})


def _msg_of(data: dict) -> str:
    msg = data.get("msg", "")
    return clean_text(msg if isinstance(msg, str) else json.dumps(msg, default=str))


def item_lines(res: TaskResult, item: dict, verbose: int, no_log: bool) -> list[tuple[str, str]]:
    """One loop item's lines: `ok: [h] => (item=x)`, `failed: [h] (item=x) => {...}` (its [ERROR] line first)."""
    status = _item_status(item)
    label, host = item_label(item, no_log), host_label(res)
    data = shown(item, res.module, no_log)
    indent = 4 if verbose > 2 or (verbose_always(res) and status != "skipped") else None
    if status == "failed":
        return [(error_line(res, _msg_of(item)), "failed"),
                (f"failed: [{host}] (item={label}) => {dump(data, indent)}", "failed")]
    word = {"ok": "ok", "changed": "changed", "skipped": "skipping"}[status]
    line = f"{word}: [{host}] => (item={label})" + (" " if status == "skipped" else "")
    if verbose or (verbose_always(res) and status != "skipped"):
        line += f" => {dump(data, indent)}"
    return [(line, status)]


# This tool's own modules (not Ansible's): their one-line message follows ok/changed, as it always did, since
# Ansible's callback has nothing to say for them and `invoke provision` tells what happened through them.
PROJECT_MODULES = frozenset({"drafter_config", "facts", "flash_attn", "gpu_cleanup", "models", "python_env",
                             "serving_bench", "speed_record", "tiny_models", "vllm_cluster", "vllm_server",
                             "vllm_status", "vllm_variant"})


def result_lines(res: TaskResult, verbose: int) -> list[tuple[str, str]]:
    """The lines of one host's result of a task, each with its colour's status, as Ansible's callback."""
    no_log = res.msg == NO_LOG_MSG
    host = host_label(res)
    indent = 4 if verbose > 2 or verbose_always(res) else None
    items = res.result.get("results") if not no_log else None
    lines: list[tuple[str, str]] = []
    if res.status == "unreachable":
        data = {"changed": False, "msg": clean_text(res.msg), "unreachable": True}
        lines.append((f"fatal: [{host}]: UNREACHABLE! => {dump(data, indent)}", "unreachable"))
    elif isinstance(items, list):
        for item in items:
            if isinstance(item, dict):
                lines += item_lines(res, item, verbose, no_log)
        if res.status == "skipped":
            rest = {k: v for k, v in res.result.items() if k != "results"}
            lines.append((f"skipping: [{res.host}]" + (f" => {dump(shown(rest, res.module), indent)}" if verbose else ""),
                          "skipped"))
    elif res.status == "failed":
        data = shown(res.result if res.result else {"msg": res.msg}, res.module, no_log)
        if "msg" not in data and res.msg and not no_log:
            data["msg"] = clean_text(res.msg)
        lines.append((error_line(res, _msg_of({"msg": res.msg})), "failed"))
        lines.append((f"fatal: [{host}]: FAILED! => {dump(data, indent)}", "failed"))
    else:
        word = {"ok": "ok", "changed": "changed", "skipped": "skipping"}[res.status]
        line = f"{word}: [{host if res.status != 'skipped' else res.host}]"
        if verbose or verbose_always(res):
            line += f" => {dump(shown(res.result, res.module, no_log), indent)}"
        elif res.module in PROJECT_MODULES and res.msg and not no_log and res.status != "skipped":
            line += f" {clean_text(res.msg)}"  # what this tool's own modules did (a server started, and why)
        lines.append((line, res.status))
    if res.ignored:
        lines.append(("...ignoring", "skipped"))
    return lines


def include_lines(res: TaskResult, base: str | None = None) -> list[str]:
    """`included: FILE for HOST` (`=> (item=x)` for each item of a looped include), as Ansible announces an
    include_tasks / include_role it reached; the engine's extra per-item records of a loop print nothing. A file
    that is there next to the including file (`base`, its folder) is shown by its full path, as Ansible's."""
    items = res.result.get("results")
    reaches = [i for i in items if isinstance(i, dict)] if isinstance(items, list) else [res.result]
    out = []
    for reach in reaches:
        what = reach.get("include") or (reach.get("include_args") or {}).get("name")
        if not what or reach.get("skipped"):
            continue
        if base and reach.get("include") and not os.path.isabs(str(what)):
            full = os.path.join(base, str(what))
            what = full if os.path.isfile(full) else what
        line = f"included: {clean_text(what)} for {res.host}"
        if isinstance(items, list):
            line += f" => (item={item_label(reach)})"
        out.append(line)
    return out


def meta_message(res: TaskResult) -> str:
    """The words of Ansible's `META: ...` line (shown from -vv) for a meta task that ran on this host."""
    action = str(res.result.get("meta", ""))
    return {
        "noop": "noop",
        "flush_handlers": f"triggered running handlers for {res.host}",
        "refresh_inventory": "inventory successfully refreshed",
        "clear_facts": "facts cleared",
        "clear_host_errors": "cleared host errors",
        "end_batch": "ending batch",
        "end_play": "ending play",
        "end_host": f"ending play for {res.host}",
        "role_complete": f"role_complete for {res.host}",
        "end_role": f"ending role {res.role} for {res.host}",
        "reset_connection": "reset connection",
    }.get(action, action)


def meta_once(res: TaskResult) -> bool:
    """Whether Ansible runs (and announces) this meta action once for all the task's hosts."""
    return str(res.result.get("meta", "")) not in _META_PER_HOST


def recap_line(host: str, counts: dict) -> str:
    """`host                       : ok=1    changed=0    unreachable=0 ...`: Ansible's fields, order and widths."""
    fields = ("ok", "changed", "unreachable", "failed", "skipped", "rescued", "ignored")
    return f"{host:<26} : " + " ".join(f"{f}={counts.get(f, 0)!s:<4}" for f in fields)
