"""Task semantics: what one task means on one host (when, loop, retries/until, changed_when/failed_when,
ignore_errors, notify, register, no_log), and recording what happened with secrets masked.

The Runner (engine/run/runner.py) decides which hosts run which task when; this module runs it on one host.
"""

from __future__ import annotations

import re
import threading
import time
from collections import ChainMap
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any

from jinja2.sandbox import SecurityError

from dflash_host.module import ModuleError, check_args  # the same argument checks the worker runs
from engine.connection import become
from engine.connection.login import check_remote_user
from engine.errors import HostUnreachable, TaskError, UserError
from engine.parsing.yamlfile import is_variable_name
from engine.playbook.model import Play, Task
from engine.playbook.modulespec import is_user_module, linked_vars, module_args_spec
from engine.playbook.user_modules import user_module_call
from engine.run.actions.call import ActionCall
from engine.run.actions.catalog import ACTIONS, LOCAL_ACTIONS, handles
from engine.run.actions.files import copy_diff_as_list
from engine.run.handlers import rendered_notify
from engine.run.includes import Reaches
from engine.run.loops import item_result_fields, item_variables, loop_items
from engine.run.results import HostState, TaskResult, status_of
from engine.run.task_args import ArgsRejected, check_rendered, templated_layers
from engine.run.trust import answer_taint, check_task
from engine.run.variables import Variables
from engine.template.bounds import render_budget
from engine.template.markers import to_bool, undefined_name
from engine.template.secrets import is_secret_name, secret_leaves
from engine.template.taint import Taint, close_frame, open_frame, union
from engine.template.templar import Templar

if TYPE_CHECKING:
    from engine.run.delegation import Delegation


# The prefix a failure that failed_when let pass gets in its message (reports recognise it by this).
ACCEPTED_PREFIX = "(failure accepted by failed_when) "



def linked_values(module: str, given: dict, view) -> dict:
    """Arguments the task leaves out, from the variables their ARGS entries name (engine/modulespec.linked_vars)."""
    return {arg: view[var] for arg, var in linked_vars(module).items() if arg not in given and var in view}


def failure_message(task: Task, exc: Exception) -> str:
    """One paragraph for an error raised while rendering or running a task."""
    where = f"{task.source} ('{task.name}')"
    if isinstance(exc, (TaskError, UserError)):
        return str(exc)
    if isinstance(exc, SecurityError):
        return (f"{where}: the template sandbox refused this task: {exc}. Templates may not reach Python internals "
                "(names starting with '_') nor build huge values; rewrite the expression.")
    name = undefined_name(exc)
    if name:
        return f"{where}: '{name}' is undefined while rendering this task ({exc}); define it or guard the task with a `when:`"
    return f"{where}: {type(exc).__name__}: {exc}"


def ansible_undefined(stage: str, exc: Exception) -> TaskError | None:
    """A render that read an undefined variable, as the task failure ansible-core 2.19 reports: `stage` is
    its words for where ("Error while evaluating conditional", "Finalization of task args for ... failed: Error
    while resolving value for 'msg'", or "" for a loop)."""
    if isinstance(exc, (TaskError, UserError)) or not re.search(r"'[^']+' is undefined", str(exc)):
        return None  # a missing attribute keeps failure_message's words
    return TaskError(f"Task failed: {stage + ': ' if stage else ''}{exc}")


class TaskExecutor:
    """Runs tasks on hosts and records the results (shown and reported with secrets masked)."""

    def __init__(self, variables: Variables, templar: Templar, *, check: bool, diff: bool, console=None) -> None:
        self.variables = variables
        self.templar = templar
        self.check = check
        self.diff = diff
        self.console = console
        self.results: list[TaskResult] = []
        self._lock = threading.Lock()
        self.delegation: Delegation | None = None  # set by the Runner: where delegate_to sends a module
        self.reaches = Reaches()  # what each host's include task reached (engine/run/includes.py)

    # -- recording -----------------------------------------------------------------------------------
    def record(self, state: HostState, res: TaskResult) -> None:
        """Count, keep and show a result: a masked copy (the registered one, used by later tasks, stays intact)."""
        secrets = self.variables.secrets
        res.msg = secrets.redact(res.msg)
        res.result = secrets.redact_obj(res.result)  # secret-named keys are hidden even when no value is known
        state.stats["ignored" if res.ignored else res.status] += 1
        if res.status == "failed" and not res.ignored:
            state.last_failure = res
        with self._lock:
            self.results.append(res)
        if self.console:
            self.console.host_result(res)

    def notice(self, res: TaskResult) -> None:
        """A finding of the tool's own about a host (a host lock taken over from a run that died): kept with the
        results for the reports, shown only as its `[WARNING]:` lines and counted in no recap column, since
        ansible-playbook runs no such task and a script that counts `ok:` lines must not see one."""
        res.msg = self.variables.secrets.redact(res.msg)
        res.result = self.variables.secrets.redact_obj(res.result)
        with self._lock:
            self.results.append(res)
        if self.console:
            for warning in res.result.get("warnings", []) or []:
                self.console.warning(str(warning))

    def record_again(self, state: HostState, res: TaskResult) -> None:
        """A result recorded before that turned out otherwise (an include whose file is not there): counted and
        shown anew."""
        res.result = self.variables.secrets.redact_obj(res.result)
        state.stats["ignored" if res.ignored else res.status] += 1
        if res.status == "failed" and not res.ignored:
            state.last_failure = res
        if self.console:
            self.console.host_result(res)

    def rescue(self, state: HostState) -> None:
        """A host that failed in a block enters its rescue: the failure counts as rescued, not failed, and the
        rescue tasks see it as ansible_failed_task / ansible_failed_result (as in Ansible)."""
        failure = state.last_failure
        state.failed = False
        if failure is None:
            return
        failure.rescued = True
        state.stats["failed"] -= 1
        state.stats["rescued"] += 1
        state.registered["ansible_failed_task"] = {"name": failure.task, "role": failure.role, "module": failure.module,
                                                   "action": failure.module}  # Ansible's key for the module
        state.registered["ansible_failed_result"] = dict(failure.result, msg=failure.msg)

    def unreachable(self, state: HostState, task_name: str, msg: str) -> None:
        state.unreachable = True
        state.unreachable_msg = msg
        res = TaskResult(state.host.name, task_name, None, "-", "unreachable", False, msg, 0.0)
        self.record(state, res)
        state.last_failure = res  # what any_errors_fatal names (an unreachable host is never rescued)

    # -- one task on one host --------------------------------------------------------------------------
    def run_task(self, state: HostState, play: Play, task: Task, handler: bool = False) -> None:
        started = time.monotonic()
        state.delegated_to, state.delegated_connection = None, ""
        state.task_taint = Taint()
        try:
            with render_budget(task.timeout):  # the task's timeout covers its rendering on the control node too
                res = self._run_task(state, play, task)
        except HostUnreachable as exc:
            self.unreachable(state, task.name, str(exc))
            return
        except Exception as exc:  # a template, argument or engine error tied to this task
            res = {"failed": True, "changed": False, "msg": failure_message(task, exc)}
            if task.register:  # registered as Ansible registers a failed task (a rescue or a later `is failed` reads it)
                state.registered[task.register] = res
        status = status_of(res)
        ignored = status == "failed" and task.ignore_errors
        if status == "failed" and not ignored:
            state.failed = True
        if status == "changed" and task.notify:  # a templated one renders as the task's arguments do
            state.notified |= set(rendered_notify(task.notify, lambda entry: self.templar.render_value(
                entry, self.variables.view(state, play, task))))
        msg = res.get("msg", "")
        if task.no_log:
            msg = "(output hidden: no_log)"
            res = {k: res.get(k) for k in ("changed", "failed", "skipped", "failure_accepted")}
        self.record(state, TaskResult(state.host.name, task.name, task.role, task.module, status, bool(res.get("changed")),
                                      str(msg), time.monotonic() - started, res, ignored, handler,
                                      delegated_to=state.delegated_to, diff=task.diff))

    def _run_task(self, state: HostState, play: Play, task: Task) -> dict:
        view = self.variables.view(state, play, task)
        if task.loop is None:
            false = next((cond for cond in task.when if not self.when_holds(cond, view)), None)
            if false is not None:  # registered too, as in Ansible (`result is skipped`)
                result = {"skipped": True, "changed": False, "msg": f"skipped: condition is false: {false}",
                          "skip_reason": "Conditional result was False", "false_condition": false}
            else:
                result = self._run_with_retries(state, play, task, None, view)
        else:  # a looped task's `when` is evaluated per item (it may use the loop variable)
            result = self._guarded_loop(state, play, task, view)
        if task.register:
            state.registered[task.register] = result
            state.facts_set.pop(task.register, None)  # one level with set_fact in Ansible: the later write wins
            state.provenance[task.register] = self._result_taint(state, task)
        if task.no_log:  # what it returned is secret wherever it is read, under its own name too
            self.variables.secrets.add(no_log_output(result))
        self._mark_hidden(state, task, result)
        return result

    def _guarded_loop(self, state: HostState, play: Play, task: Task, view) -> dict:
        """A loop whose list reads an undefined name fails the task (Ansible's words), unless its `when`, read
        without an item, is false: then the task is skipped, as Ansible's."""
        try:
            return self._loop_result(self._run_loop(state, play, task, view))
        except LoopUndefined as exc:
            try:
                false = next((cond for cond in task.when if not self.truth(cond, view)), None)
            except Exception:  # noqa: BLE001 - the condition needs the item: the loop's error stands
                false = None
            if false is None:
                raise exc.error from None
            return {"skipped": True, "changed": False, "msg": f"skipped: condition is false: {false}",
                    "skip_reason": "Conditional result was False", "false_condition": false}

    def _run_loop(self, state: HostState, play: Play, task: Task, view) -> list[dict]:
        """Each item of the task's loop run in turn (loop_control's pause between them), each result with the
        item and what loop_control adds (engine/run/loops.py)."""
        try:
            rendered, loop_taint = self.templar.render_tracked(task.loop, view)
        except Exception as exc:
            error = ansible_undefined("", exc)
            if error is None:
                raise
            raise LoopUndefined(error) from None
        if task.loop_kind == "with_first_found":
            rendered = self._first_found(rendered, loop_taint, view)
        items = loop_items(task, rendered, play, from_host=bool(loop_taint.hosts))
        loop_var = self._loop_var(task, view)
        pause = float(self.templar.render_value(task.loop_control.get("pause", 0), view) or 0)
        # an item carries what the list it came from read
        state.loop_taint = {loop_var: loop_taint, "ansible_loop": loop_taint}
        results: list[dict] = []
        try:
            for index in range(len(items)):
                if index and pause > 0:
                    time.sleep(pause)
                names = item_variables(task, loop_var, items, index)
                try:
                    result = self._run_with_retries(state, play, task, names)
                except HostUnreachable:
                    raise
                except Exception as exc:  # this item's failure; the next items still run (Ansible's _run_loop)
                    result = {"failed": True, "changed": False, "msg": failure_message(task, exc)}
                result.update(item_result_fields(task, loop_var, names))
                if "label" in task.loop_control:
                    self._label(state, play, task, names, result)
                results.append(result)
        finally:
            state.loop_taint = {}
        return results

    def _loop_var(self, task: Task, view) -> str:
        """loop_control.loop_var, rendered when it is a template (Ansible allows one)."""
        name = self.templar.render_value(task.loop_var, view)
        if not is_variable_name(name):
            raise TaskError(f"{task.source} ('{task.name}'): loop_control.loop_var gave {name!r}, not a variable name")
        return name

    def _first_found(self, terms: Any, taint: Taint, view) -> list:
        """with_first_found: Ansible's first_found lookup over the rendered terms (its trust rules, its search)."""
        names = view.with_overlay({"dfp_loop_terms": terms})
        names.provenance = ChainMap({"dfp_loop_terms": taint}, view.provenance)
        return self.templar.evaluate("query('first_found', dfp_loop_terms)", names)

    def _label(self, state: HostState, play: Play, task: Task, names: dict, result: dict) -> None:
        """loop_control.label rendered for this item (with the item's result under the register name, as
        Ansible): shown by Ansible instead of the item, and like there, a label that does not render fails the
        item (its value is not kept: Ansible's `_ansible_item_label` is not in the registered result either)."""
        extra = dict(names, **({task.register: result} if task.register else {}))
        try:
            self.templar.render_value(task.loop_control["label"], self.variables.view(state, play, task, extra))
        except Exception as exc:  # an undefined name in the label: this item's failure, named
            result.update(failed=True, msg=failure_message(task, exc))

    @staticmethod
    def _result_taint(state: HostState, task: Task) -> Taint:
        """What a registered result carries (engine/template/taint.py): an engine action's (set_fact, debug, assert) what its
        arguments read, a secret included; a module's the answer of the host it ran on and the hosts its arguments
        read (a secret it echoes is masked by its value: its other output is no secret); a no_log task's a secret."""
        taint = state.task_taint.copy()
        if task.module not in LOCAL_ACTIONS:
            if state.delegated_to:
                taint.add(answer_taint(state.delegated_to, state.delegated_connection, task.module))
            else:
                taint.add(answer_taint(state.host.name, state.host.connection, task.module))
            taint.secret = False
        taint.secret = taint.secret or bool(task.no_log)
        return taint

    @staticmethod
    def _mark_hidden(state: HostState, task: Task, result: dict) -> None:
        """Names a no_log task registered or set (secrets to whoever reads them through hostvars); a later task
        that sets the name again without no_log makes it plain again."""
        names = [task.register] if task.register else []
        if task.module == "set_fact" and not result.get("skipped"):
            names += list(task.args)
        if task.no_log:
            state.hidden.update(names)
        else:
            state.hidden.difference_update(names)

    @staticmethod
    def _loop_result(results: list[dict]) -> dict:
        if not results:  # Ansible: a loop over nothing is skipped, and counted so
            return {"results": [], "changed": False, "skipped": True, "skipped_reason": "No items in the list",
                    "msg": "No items in the list"}
        return {
            "results": results,
            "changed": any(r.get("changed") for r in results),
            "failed": any(r.get("failed") for r in results),
            "skipped": bool(results) and all(r.get("skipped") for r in results),
            "msg": "; ".join(str(r.get("msg", "")) for r in results if r.get("failed") or r.get("changed"))
            or f"{len(results)} items ok",
        }

    def truth(self, expr: Any, view) -> bool:
        from engine.run.conditionals import evaluate  # Ansible 2.19's rules: a boolean result, trusted expressions

        return evaluate(self.templar, expr, view)

    def when_holds(self, expr: Any, view) -> bool:
        """One `when` condition; an undefined name in it fails the task with Ansible's words."""
        try:
            return self.truth(expr, view)
        except Exception as exc:
            raise ansible_undefined("Error while evaluating conditional", exc) or exc from None

    def _run_with_retries(self, state: HostState, play: Play, task: Task, extra: dict | None, first_view=None) -> dict:
        attempts = 1 + (task.retries if task.retries is not None else (3 if task.until is not None else 0))
        result: dict = {}
        for attempt in range(1, attempts + 1):
            # a retry sees what changed meanwhile (a fresh view); the first attempt reuses the `when` check's
            view = first_view if attempt == 1 and first_view is not None else self.variables.view(state, play, task, extra)
            if extra is not None:
                for cond in task.when:
                    if not self.when_holds(cond, view):
                        return {"skipped": True, "changed": False, "msg": f"skipped: {cond}"}
            result = self._apply_conditions(state, play, task, extra, status_fields(self._attempt(state, play, task, view)))
            if task.until is None:
                break
            if self.truth(task.until, self._result_view(state, play, task, extra, result)):
                result["attempts"] = attempt
                break
            if attempt < attempts:
                time.sleep(task.delay)
            else:
                result = dict(result, failed=True, attempts=attempt, msg=(
                    f"gave up after {attempt} attempts: until '{task.until}' stayed false; last: {result.get('msg', '')}"))
        return result

    def _result_view(self, state: HostState, play: Play, task: Task, extra: dict | None, result: dict):
        """The variables seen by until/changed_when/failed_when: the task's result as `result` and its register name."""
        names = dict(extra or {}, result=result)
        if task.register:
            names[task.register] = result
        return self.variables.view(state, play, task, names)

    def _apply_conditions(self, state, play, task, extra, result: dict) -> dict:
        if task.changed_when is None and task.failed_when is None:
            return result
        view = self._result_view(state, play, task, extra, result)
        if task.changed_when is not None:
            changed = self._condition_result(task.changed_when, view, result, "changed_when_result")
            if changed is None:
                return result
            result["changed"] = changed
        if task.failed_when is not None:
            failed = self._condition_result(task.failed_when, view, result, "failed_when_result")
            if failed is None:
                return result
            if result.get("failed") and not failed:
                result["msg"] = f"{ACCEPTED_PREFIX}{result.get('msg', '')}"  # for the reader; readers of code: the field
                result["failure_accepted"] = True
            result["failed"] = failed
        return result

    def _condition_result(self, expr: Any, view, result: dict, field: str) -> bool | None:
        """changed_when / failed_when; None when it cannot be evaluated (an undefined name, a non-boolean result,
        a syntax error): the result, kept, then fails with the error under `field`, as Ansible 2.19's."""
        try:
            return self.truth(expr, view)
        except Exception as exc:
            error = ansible_undefined("Error while evaluating conditional", exc) or exc
            result.update({"failed": True, field: str(error).removeprefix("Task failed: ")})
            return None

    def _attempt(self, state: HostState, play: Play, task: Task, view) -> dict:
        """One try of the task on this host: its arguments rendered, then the engine action or the module (on the
        delegate's worker when delegate_to names another host)."""
        check = self.check if task.check_mode is None else bool(task.check_mode)
        # As whom the task's module calls (and uploads) run: its become keywords, else the host's variables.
        identity = become.for_task(task, view, self.templar, self.variables.secrets)
        try:
            args, taints = self._rendered_args(task, view)
        except ArgsRejected as exc:  # templated arguments that do not fit the module: this host's (item's) failure
            return {"failed": True, "changed": False, "msg": str(exc)}
        environment, env_taint = self.task_environment(task, view)
        action = handles(task.module, args)
        target = self._target(state, play, task, view, action)
        check_remote_user(task, target.host, view, self.templar)
        check_task(task, target, taints, env_taint)  # engine/run/trust.py: before anything runs
        taint = union([*taints.values(), env_taint])
        state.task_taint.add(taint)
        with target.client_lock, target.client.acting_as(identity) if target.client is not None else nullcontext():
            if action:
                result = ACTIONS[task.module](ActionCall(self, state, play, task, args, view, check, target, taints))
            elif is_user_module(task.module):  # a playbook's own module: its runner, with the module's source
                result = self.module(target, *user_module_call(task.module, args), check, task, environment)
            else:
                try:
                    check_args(module_args_spec(task.module) or {}, args, task.module)
                except ModuleError as exc:
                    raise TaskError(f"{task.source} ('{task.name}'): {exc.msg}") from None
                result = self.module(target, task.module, args, check, task, environment)
        if isinstance(result.get("diff"), dict) and taint.secret:
            # content rendered from a secret: its old version on the host is no less secret than the new one
            result["diff"] = {"before": DIFF_HIDDEN, "after": DIFF_HIDDEN}
        copy_diff_as_list(task.module, args, result)
        self._keep_facts(state, target, task, args, result)
        return result

    def _keep_facts(self, state: HostState, target: HostState, task: Task, args: dict, result: dict) -> None:
        """A result's ansible_facts into the fact cache, as Ansible's: a module's (setup's), the delegate's with
        delegate_facts; set_fact's only with `cacheable` (its values are set_fact variables besides); never a
        failed or skipped result's, nor debug's or include_vars' (variables, not facts)."""
        facts = result.get("ansible_facts")
        if not isinstance(facts, dict) or result.get("failed") or result.get("skipped"):
            return
        if task.module in ("debug", "include_vars") or (task.module == "set_fact" and not to_bool(args.get("cacheable"))):
            return
        self.variables.secrets.add(secret_leaves(facts))
        (target if task.delegate_facts else state).add_facts(facts)

    def _rendered_args(self, task: Task, view) -> tuple[dict, dict[str, Taint]]:
        """The task's arguments rendered for this host, with those its module links to variables, and what each
        one read (engine/template/taint.py: the trust rule and the secrecy of a diff are judged on it)."""
        args: dict = {}
        taints: dict[str, Taint] = {}
        for arg, var in linked_vars(task.module).items():
            if arg not in task.args and var in view:
                frame = open_frame()
                try:
                    args[arg] = view[var]
                finally:
                    close_frame(frame)
                taints[arg] = frame
        for layer, taint in templated_layers(self.templar, task, view):  # `args: "{{ d }}"`: under the written ones
            for key, value in layer.items():
                args[key], taints[key] = value, taint
        for key, value in task.args.items():
            name = self.templar.render_value(key, view)
            try:
                args[name], taints[name] = self.templar.render_tracked(value, view)
            except Exception as exc:
                raise ansible_undefined(f"Finalization of task args for 'ansible.builtin.{task.module}' failed: "
                                        f"Error while resolving value for '{name}'", exc) or exc from None
        check_rendered(task, args)
        keep_none = task.module == "set_fact"  # `x: ~` sets x to None, as Ansible's
        return {k: v for k, v in args.items() if v is not None or keep_none or k in ("content",)}, taints

    def _target(self, state: HostState, play: Play, task: Task, view, action: bool) -> HostState:
        """Where the module runs: this host, or its delegate (connected unless the action never leaves here)."""
        if task.delegate_to is None or self.delegation is None:
            return state
        target = self.delegation.target(state, play, task, view, connect=not (action and task.module in LOCAL_ACTIONS))
        state.delegated_to = target.host.name if target is not state else None
        state.delegated_connection = target.host.connection
        return target

    def module(self, state: HostState, module: str, args: dict, check: bool, task: Task | None = None,
               environment: dict | None = None) -> dict:
        """One module call on the host (progress lines shown live, masked), with the task's environment."""
        progress = None
        if self.console and task is not None and not task.no_log:
            progress = lambda msg, h=state.host.name: self.console.progress(h, self.variables.secrets.redact(msg))  # noqa: E731
        timeout = task.timeout if task is not None else None
        diff = self.diff if task is None or task.diff is None else task.diff  # the task's `diff` keyword wins
        return state.client.run(module, args, check=check, diff=diff, timeout_s=timeout, progress=progress,
                                environment=environment)

    @staticmethod
    def _environment_values(task: Task, name: str | None, rendered: Any) -> dict[str, str]:
        """{name: value as a string} of one rendered entry, or of a template layer that must give a mapping."""
        if name is not None:
            return {name: rendered if isinstance(rendered, str) else str(rendered)}
        if not isinstance(rendered, dict):
            raise TaskError(f"{task.source} ('{task.name}'): 'environment' gave {type(rendered).__name__}, not a "
                            "mapping of variable names to values; fix the template or the variable it reads")
        return {str(k): v if isinstance(v, str) else str(v) for k, v in rendered.items()}

    def task_environment(self, task: Task, view) -> tuple[dict | None, Taint]:
        """The task's `environment` for this host: its layers (play, blocks, task) rendered and merged, values as
        strings (as Ansible passes them), and what they read; a secret-named variable's value joins the secrets
        (masked wherever the module's output shows it)."""
        if not task.environment:
            return None, Taint()
        merged: dict[str, str] = {}
        taint = Taint()
        for layer in task.environment:
            # a mapping value by value (each one's secrecy its own), a template giving a mapping as a whole
            parts = list(layer.items()) if isinstance(layer, dict) else [(None, layer)]
            for name, value in parts:
                rendered, read = self.templar.render_tracked(value, view)
                taint.add(read)
                for key, text in self._environment_values(task, name, rendered).items():
                    if read.secret or is_secret_name(key):
                        self.variables.secrets.add(text)
                    merged[key] = text
        return merged, taint


def status_fields(result: dict) -> dict:
    """`failed` and `changed` in every result that ran, as Ansible's task executor adds them (a nonzero `rc`
    is a failure): `result.failed` reads the same whatever action or module gave it."""
    if "failed" not in result:
        result["failed"] = "rc" in result and result["rc"] not in (0, "0")
    result.setdefault("changed", False)
    return result


class LoopUndefined(Exception):
    """A loop's list read an undefined name (its task error inside), until the task's `when` is read."""

    def __init__(self, error: TaskError) -> None:
        super().__init__(str(error))
        self.error = error


DIFF_HIDDEN = "(diff hidden: the content was rendered from a secret)\n"
NO_LOG_OUTPUT = ("stdout", "stderr", "stdout_lines", "stderr_lines", "content", "ansible_facts", "json", "results")


def no_log_output(result: dict) -> list:
    """What a no_log task produced (its output, set values, loop items' output), not its status words."""
    out: list = []
    for key in NO_LOG_OUTPUT:
        value = result.get(key)
        if key == "results" and isinstance(value, list):
            out += [no_log_output(r) for r in value if isinstance(r, dict)]
        elif value is not None:
            out.append(value)
    return out
