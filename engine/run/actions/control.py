"""Engine actions that run on the control node and touch no host: assert, fail, debug, set_fact, meta and the
includes' own results. Messages are shown with every secret masked, however a render transformed it."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from jinja2 import UndefinedError

from engine.errors import UserError
from engine.parsing.yamlfile import is_written
from engine.run.actions.call import ActionCall
from engine.run.conditionals import AS_TEMPLATE, UNTRUSTED, BrokenConditional, all_template
from engine.run.includes import reach_of
from engine.run.task_args import as_written
from engine.template.markers import is_template
from engine.template.secrets import MASK, Display, is_secret_name, secret_leaves
from engine.template.taint import Taint

if TYPE_CHECKING:
    from engine.template.templar import LazyVars


def assert_(call: ActionCall) -> dict:
    """Ansible's assert: `that` (one or a list), fail_msg (alias msg), success_msg, quiet; the result's
    assertion and evaluated_to name the condition that failed (ours also puts it in the default message)."""
    that = as_written(call.task, call.args, call.taints, "that")
    from_template = isinstance(that, str) and is_template(that) and isinstance(call.args.get("that"), list)
    if from_template:
        that = rendered_conditions(call)  # `that: "{{ checks }}"`: the list of conditions a variable holds
    if that is None or that == "" or that == []:
        return {"failed": True, "changed": False, "msg": "Empty conditional expression in assert's 'that'; give "
                                                          "one condition or a list of them (that: x > 1)"}
    conditions = that if isinstance(that, list) else [that]
    if "that" not in call.task.args and any(isinstance(c, str) and not is_written(c) for c in conditions):
        raise BrokenConditional(UNTRUSTED)  # `assert: "{{ item }}"`: a condition its template computed is data
    deprecations: list[dict] = []
    for cond in conditions:
        holds = call.truth(cond)
        # a condition written as a template (`'{{ x == 1 }}'`), or one of a `that: "{{ checks }}"` list already
        # rendered to its value: Ansible registers its deprecation besides the warning line
        if isinstance(cond, str) and all_template(cond.strip()) or from_template and not isinstance(cond, str):
            deprecations.append(_deprecation(AS_TEMPLATE))
        if not holds:
            key = "fail_msg" if call.args.get("fail_msg") else "msg"
            msg = call.args.get(key) or f"Assertion failed: {cond}"
            masked = shown(call, lambda view, k=key: call.executor.templar.render_value(call.task.args.get(k), view), key)
            msg = str(masked) if masked is not None and call.args.get(key) else msg
            return {"failed": True, "changed": False, "msg": msg, "assertion": cond, "evaluated_to": False,
                    **({"deprecations": deprecations} if deprecations else {})}
    return {"changed": False, "msg": call.args.get("success_msg") or "All assertions passed",
            **({"deprecations": deprecations} if deprecations else {})}


def _deprecation(message: str) -> dict:
    """One entry of a result's `deprecations`, as ansible-core 2.19 registers it (playbooks test for them)."""
    return {"collection_name": "ansible.builtin", "deprecator": {"resolved_name": "ansible.builtin", "type": None},
            "msg": message, "version": "2.23"}


def rendered_conditions(call: ActionCall) -> list:
    """assert's `that` written as a template giving a list: its conditions, as Ansible evaluates them, unless
    a host's answer wrote them (an expression is code)."""
    taint = call.taints.get("that")
    if taint is not None and taint.hosts:
        from engine.errors import TaskError

        raise TaskError(f"{call.where()}: assert's 'that' gave conditions built from what a host returned "
                        f"({taint.describe()}), and a host's answer is never evaluated as an expression here; write "
                        "the conditions in the playbook.")
    return list(call.args["that"])


def fail(call: ActionCall) -> dict:
    msg = call.args.get("msg") or "failed as requested"
    masked = shown(call, lambda view: call.executor.templar.render_value(call.task.args.get("msg"), view), "msg")
    return {"failed": True, "changed": False, "msg": str(masked) if masked is not None and call.task.args.get("msg") else msg}


TAINTED = f"{MASK} (computed from a secret)"


def display_view(view: LazyVars, display: Display) -> LazyVars:
    """The task's variables with every secret it read shown as `display` says (a secret-named variable whole, a
    variable holding secrets inside, another host's through hostvars, a lookup's result): a message rendered again
    over it shows the mask wherever the secret went, and the rest as it is."""
    overlay: dict = {"hostvars": view["hostvars"].for_display(display)} if "hostvars" in view else {}
    for name in list(view.touched):
        if name == "hostvars":
            continue
        try:
            taint, value = view.taint_of(name), view[name]
        except Exception:  # noqa: S112 - unrenderable: nothing to mask
            continue
        if taint.secret or secret_leaves(value):  # `creds` whose `password` the message reads
            whole = is_secret_name(name) or not isinstance(value, (dict, list))
            overlay[name] = display.whole(value) if whole else display.inside(value)
    return view.with_overlay(overlay, masking=display)


def shown(call: ActionCall, render, key: str) -> Any:
    """`render(view)` for display: None when the argument read no secret, or when rendering it with every secret's
    characters substituted gives the same (it shows a length, say: readable again); else rendered again with the
    mask in each secret's place."""
    taint, value = call.taints.get(key), call.args.get(key)
    if not (taint and taint.secret) or not isinstance(value, (str, dict, list)):
        return None  # a number or a truth computed from a secret (a length, a comparison) is not its text
    secrets = call.executor.variables.secrets
    try:
        if render(display_view(call.view, Display(secrets, substituting=True))) == value:
            if isinstance(value, str):
                secrets.forget(value)
            return None
        return render(display_view(call.view, Display(secrets, substituting=False)))
    except Exception:  # a filter that cannot take the mask (| int): the whole message is hidden
        return TAINTED


def meta(call: ActionCall) -> dict:
    """The result of a `meta` task on a host where its `when` held; the Runner then flushes handlers or ends the
    host or the play (engine/run/runner.py _meta)."""
    return {"changed": False, "msg": f"meta: {call.args['action']}", "meta": call.args["action"]}


def included(call: ActionCall) -> dict:
    """An include reached on this host (and item): its tasks follow here (the Runner runs them where this one
    ran; a templated name or a loop is read then: engine/run/includes.py). Its result as Ansible's."""
    call.executor.reaches.add(call.state.host.name, reach_of(call))
    if call.task.module == "include_role":
        return {"changed": False, "msg": f"included: {call.args.get('name')}", "include_args": dict(call.args)}
    rest = {k: v for k, v in call.args.items() if k != "file"}
    return {"changed": False, "msg": f"included: {call.args.get('file')}", "include": call.args.get("file"),
            "include_args": rest}


def debug(call: ActionCall) -> dict:
    """Ansible's debug: msg (default "Hello world!") or var, an expression whose value is shown under its own
    text; one that reads something undefined shows Ansible 2.19's placeholder and a warning, not a failure. Shown
    from the -v level `verbosity` on (below it: skipped, as Ansible's)."""
    templar = call.executor.templar
    console = call.executor.console
    if "var" in call.args and "msg" in call.args:
        return {"failed": True, "changed": False, "msg": "parameters are mutually exclusive: msg|var"}
    if int(call.args.get("verbosity") or 0) > (console.verbose if console is not None else 0):
        return {"skipped": True, "changed": False, "failed": False, "msg": "Verbosity threshold not met.",
                "skipped_reason": "Verbosity threshold not met."}
    if "var" in call.args:
        return _debug_var(call)
    msg = str(call.args.get("msg", "Hello world!"))
    masked = shown(call, lambda view: templar.render_value(call.task.args.get("msg", "Hello world!"), view), "msg")
    return {"changed": False, "failed": False, "msg": str(masked) if masked is not None else msg}


def _debug_var(call: ActionCall) -> dict:
    """debug's var: the expression as written in the playbook (never a rendered, host-derived string) evaluated;
    what it reads undefined gives "<< error 1 - ... >>" in its place, as ansible-core 2.19 shows it."""
    templar = call.executor.templar
    expr, name = as_written(call.task, call.args, call.taints, "var"), str(call.args["var"])
    warnings = []
    try:
        value, taint = templar.evaluate_tracked(expr, call.view)
    except UndefinedError as exc:
        why = ansible_undefined_message(str(exc))
        value, taint = f"<< error 1 - {why} >>", Taint()
        warnings.append(f"Encountered 1 template error.\nerror 1 - {why}")
    if taint.secret:
        try:
            value = templar.evaluate(expr, display_view(call.view, Display(call.executor.variables.secrets, False)))
        except Exception:  # a filter that cannot take the mask
            value = MASK
    result = {"changed": False, "failed": False, "msg": f"{name} = {value!r}", name: value}
    return dict(result, warnings=warnings) if warnings else result


def ansible_undefined_message(text: str) -> str:
    """Jinja2's words for an undefined name or attribute as Ansible 2.19 writes them ("'dict object' has no
    attribute 'x'" is "object of type 'dict' has no attribute 'x'")."""
    m = re.search(r"'(\w+) object' has no attribute '([^']*)'", text)
    if m:
        return f"object of type '{m.group(1)}' has no attribute '{m.group(2)}'"
    m = re.search(r"'[^']+' is undefined", text)
    return m.group(0) if m else text


JINJA_NAMES = frozenset({"true", "false", "none", "True", "False", "None", "not"})  # never a variable's name


def check_fact_name(call: ActionCall, name: Any) -> None:
    """A set_fact key, once rendered (`"{{ a_key }}": value`), is a variable name, with Ansible's words if not."""
    if isinstance(name, str) and name.isidentifier() and name.isascii() and name not in JINJA_NAMES:
        return
    from engine.errors import TaskError

    shown_name = f"name {str(name)!r}" if isinstance(name, (str, int, float, bool, type(None))) else "name"
    if not isinstance(name, str):
        shown_name += f" of type {type(name).__name__!r}"
    raise TaskError(f"{call.where()}: Invalid variable {shown_name}. Variable names must be strings starting with a "
                    "letter or underscore character, and contain only letters, numbers and underscores; fix the "
                    "set_fact key (or the variable its template reads).")


def set_fact(call: ActionCall) -> dict:
    variables = call.executor.variables
    values = {k: v for k, v in call.args.items() if k != "cacheable"}  # Ansible's fact cache: none here
    if not values:
        return {"failed": True, "changed": False,
                "msg": "No key/value pairs provided, at least one is required for this action to succeed"}
    for name in values:
        check_fact_name(call, name)
    owner = call.facts_owner
    for name, value in values.items():
        taint = (call.taints.get(name) or Taint()).copy()  # what the value read is what it carries (engine/template/taint.py)
        if is_secret_name(name):  # a value computed from a secret was kept by its render already
            taint.secret = True
            variables.secrets.add(value)
        owner.provenance[name] = taint
    owner.facts_set.update(values)
    for name in values:  # set_fact and register share one level in Ansible: the later write wins
        owner.registered.pop(name, None)
    return {"changed": False, "msg": f"set {', '.join(values)}", "ansible_facts": values}


def _whole(call: ActionCall, name: str) -> int | None:
    """pause's minutes or seconds as Ansible's int() takes them (a float is cut, "1.5" refused)."""
    value = call.args.get(name)
    if value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        from engine.errors import TaskError

        raise TaskError(f"{call.where()}: pause's {name} must be a whole number, got {value!r}") from None


def pause(call: ActionCall) -> dict:
    """Ansible's pause without a terminal: minutes or seconds are slept (at least 1 s); a prompt with no time is
    not waited for (stdin is not read), with Ansible's warning. The result has its fields (stdout "Paused for N
    seconds", delta, start, stop, user_input '', echo)."""
    import datetime
    import time

    minutes, seconds = _whole(call, "minutes"), _whole(call, "seconds")
    if minutes is not None and seconds is not None:
        return {"failed": True, "changed": False, "msg": "parameters are mutually exclusive: minutes|seconds"}
    wait, unit = (minutes * 60, "minutes") if minutes is not None else (seconds, "seconds" if seconds is not None else "minutes")
    start, started = time.time(), str(datetime.datetime.now())
    result: dict = {"changed": False, "rc": 0, "stderr": "", "echo": bool(call.args.get("echo", True)),
                    "start": started, "user_input": ""}
    if wait is None:
        result["warnings"] = ["Not waiting for response to prompt as stdin is not interactive"]
    else:
        time.sleep(max(wait, 1))
    took = time.time() - start
    shown = round(took / 60.0, 2) if unit == "minutes" else round(took, 2)
    result.update(stop=str(datetime.datetime.now()), delta=int(took), stdout=f"Paused for {shown} {unit}")
    return result


HOST_NAME_KEYS = ("name", "hostname", "host")
ADD_HOST_SPECIAL = frozenset({"name", "hostname", "groupname", "groups"})  # not host variables (Ansible's set)


def add_host(call: ActionCall) -> dict:
    """Ansible's add_host (once per batch, as its action bypasses the host loop; per item in a loop): the host
    joins the in-memory inventory, in `groups` (`groupname`, `group`; a list or a comma-separated string), with
    every other argument as a host variable; the later plays may target it. Its name, and every `ansible_*`
    variable (the address, port, user, connection, interpreter), must come from the playbook: a host's answer
    never chooses where the control node connects or what it runs (docs/SAFETY.md)."""
    from engine.errors import TaskError

    args = call.args
    name = next((args[k] for k in HOST_NAME_KEYS if args.get(k) is not None), None)
    if name is None:
        return {"failed": True, "changed": False, "msg": "name, host or hostname needs to be provided"}
    _refuse_host_data(call, [k for k in args if k in HOST_NAME_KEYS or str(k).startswith("ansible_")])
    groups = next((args[k] for k in ("groupname", "groups", "group") if args.get(k) is not None), "")
    if isinstance(groups, str):
        groups = [g.strip() for g in groups.split(",") if g.strip()]
    if not isinstance(groups, list) or not all(isinstance(g, str) for g in groups):
        raise TaskError(f"{call.where()}: Groups must be specified as a list (groups: [web, db] or 'web,db')")
    host_name, port = _name_and_port(str(name))
    host_vars = {k: v for k, v in args.items() if k not in ADD_HOST_SPECIAL}
    if port is not None:
        host_vars["ansible_ssh_port"] = port
    try:
        changed = call.executor.variables.inventory.add_dynamic_host(host_name, list(dict.fromkeys(groups)),
                                                                     host_vars, f"{call.where()}: add_host")
    except UserError as exc:
        raise TaskError(str(exc)) from None
    call.executor.variables.refresh_groups()
    return {"changed": changed, "add_host": {"host_name": host_name, "groups": groups, "host_vars": host_vars}}


def _name_and_port(name: str) -> tuple[str, int | None]:
    """`host:2222` as Ansible's parse_address reads a name with a port (IPv6 in brackets); else the name."""
    m = re.fullmatch(r"\[([^\]]+)\]:(\d+)|([^:\[\]]+):(\d+)", name)
    if not m:
        return name, None
    return (m.group(1) or m.group(3)), int(m.group(2) or m.group(4))


def _refuse_host_data(call: ActionCall, keys: list) -> None:
    from engine.errors import TaskError

    for key in keys:
        taint = call.taints.get(key)
        if taint is not None and taint.hosts:
            raise TaskError(f"{call.where()}: add_host's '{key}' is built from what a host returned "
                            f"({taint.describe()}), and a host's answer never names a host the control node then "
                            "reaches, nor its address, port, user or connection; write it in the playbook or the "
                            "inventory, or check it first against a list the playbook writes (`when: out.stdout in "
                            "allowed`) and use the list's item.")


def group_by(call: ActionCall) -> dict:
    """Ansible's group_by: this host joins the group `key` (spaces made '-'), made under `parents` (default
    all) when new; the later plays may target it. A key built from facts only groups hosts already known."""
    from engine.errors import TaskError

    key = call.args.get("key")
    if key is None:
        return {"failed": True, "changed": False, "msg": "the 'key' param is required when using group_by"}
    parents = call.args.get("parents", ["all"])
    parents = [parents] if isinstance(parents, str) else parents
    if not isinstance(parents, list):
        raise TaskError(f"{call.where()}: group_by's parents must be a group name or a list of them")
    group, parent_groups = str(key).replace(" ", "-"), [str(p).replace(" ", "-") for p in parents]
    try:
        changed = call.executor.variables.inventory.add_to_group(call.state.host.name, group, parent_groups,
                                                                 f"{call.where()}: group_by")
    except UserError as exc:
        raise TaskError(str(exc)) from None
    call.executor.variables.refresh_groups()
    return {"changed": changed, "add_group": group, "parent_groups": parent_groups}
