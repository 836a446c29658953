"""Engine actions: tasks that run on the control node (assert, fail, debug, set_fact) or prepare what a
host module receives (template renders here; copy with `src:` uploads only what differs).

Each action is a function registered under its task name; it gets an ActionCall and returns a result dict
like a module's. Adding one: write the function, decorate it with @action("name"), and give its argument
table in engine/playbook/modulespec.py ENGINE_ACTIONS.
"""

from __future__ import annotations

import hashlib
import importlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from engine.errors import TaskError
from engine.playbook.model import Play, Task
from engine.run.results import HostState
from engine.template.secrets import MASK, Display, is_secret_name, secret_leaves
from engine.template.taint import Taint, union

if TYPE_CHECKING:
    from engine.run.task_executor import TaskExecutor
    from engine.template.templar import LazyVars


@dataclass
class ActionCall:
    """One action's call: the task, its rendered args, the variables it saw, and a way to call modules."""

    executor: TaskExecutor
    state: HostState
    play: Play
    task: Task
    args: dict
    view: LazyVars
    check: bool
    target: HostState | None = None  # where its module calls and uploads go (delegate_to); None: `state` itself
    taints: dict = field(default_factory=dict)  # what each argument's render read (engine/template/taint.py)

    @property
    def taint(self) -> Taint:
        return union(self.taints.values())

    @property
    def on(self) -> HostState:
        """The host the action's module calls and uploads reach."""
        return self.target or self.state

    @property
    def facts_owner(self) -> HostState:
        """Whose variables set_fact sets: the delegate's only with delegate_facts, as in Ansible."""
        return self.on if self.task.delegate_facts else self.state

    def module(self, name: str, args: dict, check: bool | None = None) -> dict:
        return self.executor.module(self.on, name, args, self.check if check is None else check, self.task)

    def truth(self, expr: Any) -> bool:
        return self.executor.truth(expr, self.view)

    def where(self) -> str:
        return f"{self.task.source} ('{self.task.name}')"


ACTIONS: dict[str, Callable[[ActionCall], dict]] = {}


def action(name: str):
    def register(fn: Callable[[ActionCall], dict]) -> Callable[[ActionCall], dict]:
        ACTIONS[name] = fn
        return fn

    return register


def action_in(name: str, module: str) -> None:
    """Action `name` lives in `module`, imported at its first call (it registers itself with @action there): a
    run that never uses it does not pay the module's imports (the models relay's HTTP client: ~10 ms a run)."""

    def first_call(call: ActionCall) -> dict:
        importlib.import_module(module)
        return ACTIONS[name](call)

    ACTIONS[name] = first_call


def handles(module: str, args: dict) -> bool:
    """True when the engine runs this task itself (copy without `src:` is the host module alone; models only
    when the control node carries the files: engine/run/model_relay.py)."""
    if module == "models":
        from engine.run.model_relay import relayed

        return relayed(args)
    return module in ACTIONS and not (module == "copy" and ("src" not in args or args.get("remote_src")))


@action("assert")
def assert_(call: ActionCall) -> dict:
    """Ansible's assert: `that` (one or a list), fail_msg (alias msg), success_msg, quiet; the result's
    assertion and evaluated_to name the condition that failed (ours also puts it in the default message)."""
    that = call.task.args["that"]
    conditions = that if isinstance(that, list) else [that]
    for cond in conditions:
        if not call.truth(cond):
            key = "fail_msg" if call.args.get("fail_msg") else "msg"
            msg = call.args.get(key) or f"Assertion failed: {cond}"
            masked = shown(call, lambda view, k=key: call.executor.templar.render_value(call.task.args.get(k), view), key)
            msg = str(masked) if masked is not None and call.args.get(key) else msg
            return {"failed": True, "changed": False, "msg": msg, "assertion": cond, "evaluated_to": False}
    return {"changed": False, "msg": call.args.get("success_msg") or "All assertions passed"}


@action("fail")
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


@action("meta")
def meta(call: ActionCall) -> dict:
    """The result of a `meta` task on a host where its `when` held; the Runner then flushes handlers or ends the
    host or the play (engine/run/runner.py _meta)."""
    return {"changed": False, "msg": f"meta: {call.args['action']}", "meta": call.args["action"]}


@action("include_tasks")
@action("include_role")
def included(call: ActionCall) -> dict:
    """An include reached on this host: its tasks follow here (the Runner runs them where this one ran)."""
    what = call.args.get("file") or call.args.get("name")
    return {"changed": False, "msg": f"included: {what}"}


@action("debug")
def debug(call: ActionCall) -> dict:
    """Ansible's debug: msg or var, shown from the -v level `verbosity` on (below it: skipped, as Ansible's)."""
    templar = call.executor.templar
    console = call.executor.console
    if int(call.args.get("verbosity") or 0) > (console.verbose if console is not None else 0):
        return {"skipped": True, "changed": False, "msg": "Verbosity threshold not met."}
    if "var" in call.args:  # the expression as written in the playbook, never a rendered (host-derived) string
        expr = call.task.args["var"]
        value, taint = templar.evaluate_tracked(expr, call.view)
        if taint.secret:
            try:
                value = templar.evaluate(expr, display_view(call.view, Display(call.executor.variables.secrets, False)))
            except Exception:  # a filter that cannot take the mask
                value = MASK
        return {"changed": False, "msg": f"{call.args['var']} = {value!r}", call.args["var"]: value}
    msg = str(call.args.get("msg", "hello"))
    masked = shown(call, lambda view: templar.render_value(call.task.args.get("msg", "hello"), view), "msg")
    return {"changed": False, "msg": str(masked) if masked is not None else msg}


@action("set_fact")
def set_fact(call: ActionCall) -> dict:
    variables = call.executor.variables
    values = {k: v for k, v in call.args.items() if k != "cacheable"}  # Ansible's fact cache: none here
    owner = call.facts_owner
    for name, value in values.items():
        taint = (call.taints.get(name) or Taint()).copy()  # what the value read is what it carries (engine/template/taint.py)
        if is_secret_name(name):  # a value computed from a secret was kept by its render already
            taint.secret = True
            variables.secrets.add(value)
        owner.provenance[name] = taint
    owner.facts_set.update(values)
    return {"changed": False, "msg": f"set {', '.join(values)}", "ansible_facts": values}


def from_host_data(call: ActionCall, key: str) -> bool:
    """The task's argument `key` was rendered from data a host returned (engine/template/taint.py)."""
    taint = call.taints.get(key)
    return bool(taint and taint.hosts)


def resolve_local(call: ActionCall, src: str, sub: str) -> Path:
    """A file of the control node named by a task: absolute, or in the role's or playbook's `sub` folder.

    A path built from what a host returned (`{{ out.stdout }}`) is data, not the playbook's word: it must stay
    inside the role's or the playbook's folders (no absolute path, no way out with '..' or a symlink)."""
    task, play = call.task, call.play
    from_host = from_host_data(call, "src")
    folders = ([task.role_dir / sub] if task.role_dir is not None else []) + [play.source.parent / sub, play.source.parent]
    candidates = []
    if os.path.isabs(os.path.expanduser(src)) and not from_host:
        candidates.append(Path(os.path.expanduser(src)))
    candidates += [folder / src for folder in folders]
    for c in candidates:
        if c.exists():
            if from_host and not any(c.resolve().is_relative_to(f.resolve()) for f in folders):
                break
            return c
    if from_host:
        raise TaskError(f"{call.where()}: {sub[:-1]} source '{src}' comes from what a host returned, and such a path "
                        f"must name a file inside {', '.join(str(f) for f in folders)}; write the path in the playbook")
    raise TaskError(f"{call.where()}: {sub[:-1]} source '{src}' not found; looked in " + ", ".join(str(c) for c in candidates))


@action("template")
def template(call: ActionCall) -> dict:
    src = resolve_local(call, call.args["src"], "templates/")
    content = call.executor.templar.render_file(str(src), call.view)
    copy_args = {"dest": call.args["dest"], "content": content}
    for k in ("mode", "owner", "group", "backup", "force", "validate"):  # Ansible's template options the copy has
        if call.args.get(k) is not None:
            copy_args[k] = call.args[k]
    return call.module("copy", copy_args)


def _copy_entries(call: ActionCall, src: Path, dest: str) -> tuple[list[tuple[Path, str]], str]:
    """(local file, path relative to the destination folder) pairs, and that folder."""
    if src.is_dir():
        return [(p, str(p.relative_to(src))) for p in sorted(p for p in src.rglob("*") if p.is_file())], dest
    if call.args.get("delete_extra"):
        raise TaskError(f"{call.where()}: delete_extra needs a folder as src; with a single file it would delete "
                        "the other files beside dest")
    if dest.endswith("/"):
        return [(src, src.name)], dest
    return [(src, os.path.basename(dest.rstrip("/")))], os.path.dirname(dest.rstrip("/"))


def _upload(call: ActionCall, needed: list[str], by_rel: dict, stage_root: str, dest: str) -> dict:
    """Put each needed file in a staging folder on the host; a failed upload removes it and fails the task."""
    call.module("file", {"path": stage_root, "state": "directory", "mode": "0700"}, False)
    staged = {}
    for rel in needed:
        path, digest = by_rel[rel]
        remote = f"{stage_root}/{digest}"
        try:
            call.on.client.put(str(path), remote)
        except OSError as exc:  # a full disk or a permission on the host: dest is untouched
            call.module("file", {"path": stage_root, "state": "absent", "recurse": True}, False)
            reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
            raise TaskError(f"{call.where()}: uploading {path} to {dest} failed: {reason}. {dest} is unchanged; free "
                            "space or fix the permissions there and run again.") from None
        staged[rel] = remote
    return staged


def staging_folder(plan: dict, dest_dir: str) -> str:
    """dest's .dfp-staging as the host named it in its plan: an absolute path, `~` expanded there for the user the
    module ran as (become included), as Ansible does. Never the task's text: a `dfp_root: ~/dflash-local` would
    reach the upload as a literal `~` while the install looked in the home folder."""
    return f"{str(plan.get('dest') or dest_dir).rstrip('/')}/.dfp-staging"


COPY_FOLDER_ARGS = ("delete_extra", "mode", "owner", "group")  # what the host's copy takes beside a manifest


@action("copy")
def copy_from_control_node(call: ActionCall) -> dict:
    """copy with `src:` on the control node: plan on the host, upload what differs, install atomically."""
    src = resolve_local(call, str(call.args.pop("src")), "files/")
    dest = str(call.args["dest"])
    entries, dest_dir = _copy_entries(call, src, dest)
    given_mode = call.args.get("mode")  # the task's mode for every file; else each keeps the control node's
    manifest = [{"path": rel, "sha256": hashlib.sha256(p.read_bytes()).hexdigest(),
                 **({} if given_mode is not None else {"mode": "%04o" % (p.stat().st_mode & 0o777)})}
                for p, rel in entries]
    extra = {k: v for k, v in call.args.items() if k in COPY_FOLDER_ARGS}
    plan = call.module("copy", {"dest": dest_dir, "manifest": manifest, "phase": "plan", **extra})
    if plan.get("failed") or call.check or not plan.get("would_change"):
        return plan
    stage_root = staging_folder(plan, dest_dir)
    staged = {}
    if plan.get("needed"):
        by_rel = {rel: (path, m["sha256"]) for (path, rel), m in zip(entries, manifest)}
        staged = _upload(call, plan["needed"], by_rel, stage_root, dest)
    result = call.module("copy", {"dest": dest_dir, "manifest": manifest, "phase": "install", "staged": staged, **extra})
    if staged:
        call.module("file", {"path": stage_root, "state": "absent", "recurse": True}, False)
    return result
