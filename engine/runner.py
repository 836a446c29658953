"""Run plays: hosts in parallel (bounded by forks), tasks in order, one worker per host.

Linear strategy, as in Ansible: each task runs on every active host before the next task starts, so
the output reads as a runbook. A failed host stops; the others go on. Unreachable hosts are retried
(tenacity) before they count as unreachable.
"""

from __future__ import annotations

import functools
import getpass
import hashlib
import os
import re
import socket
import sys
import threading
import time
import uuid
from collections import ChainMap
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from jinja2.sandbox import SecurityError

from engine import runtime
from engine.errors import HostUnreachable, TaskError, UserError
from engine.inventory import Host, Inventory
from engine.playbook import LIBRARY, Play, Task, module_args_spec, modules
from engine.secrets import Secrets, has_value, is_secret_name
from engine.templating import Templar, is_template, to_bool, undefined_name
from engine.transport import Transport, WorkerDied, connect

# The host lock: a file under dfp_root (or the tool's cache folder for plays that define no dfp_root).
LOCK_NAME = ".dflash-provision.lock"
NO_ROOT_LOCK = f"~/.cache/dflash-provision/{LOCK_NAME}"


def describe_holder(holder: Any) -> str:
    """One line about the run that holds (or held) a host lock, from the record it wrote."""
    if not isinstance(holder, dict) or not holder:
        return "a run that left no record"
    if "error" in holder or "unreachable" in holder:
        return f"(could not read the lock: {holder})"
    return (
        f"playbook {holder.get('playbook')} from control node {holder.get('control_node')} (user "
        f"{holder.get('user')}, pid {holder.get('pid')}), started {holder.get('started')}, worker pid "
        f"{holder.get('worker_pid')} on the host"
    )


STATUSES = ("ok", "changed", "failed", "skipped", "unreachable", "ignored")
# Names every task may use besides variables: the `magic` layer of Runner.variables, facts, and the
# `result` bound while changed_when/failed_when/until are evaluated.
MAGIC_VARS = {
    "inventory_hostname",
    "group_names",
    "groups",
    "hostvars",
    "ansible_check_mode",
    "ansible_diff_mode",
    "playbook_dir",
    "role_path",
    "omit",
    "facts",
    "result",
}


@dataclass
class TaskResult:
    host: str
    task: str
    role: str | None
    module: str
    status: str
    changed: bool
    msg: str
    duration_s: float
    result: dict = field(default_factory=dict)
    ignored: bool = False
    handler: bool = False

    def as_report(self) -> dict:
        return {
            "host": self.host,
            "role": self.role,
            "task": self.task,
            "module": self.module,
            "status": self.status,
            "changed": self.changed,
            "msg": self.msg,
            "duration_s": round(self.duration_s, 4),
            "ignored": self.ignored,
            "handler": self.handler,
            "warnings": self.result.get("warnings", []),
        }


@dataclass
class HostState:
    host: Host
    transport: Transport | None = None
    facts: dict | None = None
    registered: dict = field(default_factory=dict)
    facts_set: dict = field(default_factory=dict)
    failed: bool = False
    unreachable: bool = False
    notified: set = field(default_factory=set)
    stats: dict = field(default_factory=lambda: {s: 0 for s in STATUSES})
    unreachable_msg: str = ""


def _common_module():
    """library/_common.py on the control node: the same argument checks the worker runs."""
    import importlib.util

    if "_dfp_common" in sys.modules:
        return sys.modules["_dfp_common"]
    spec = importlib.util.spec_from_file_location("_dfp_common", LIBRARY / "_common.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["_dfp_common"] = mod
    spec.loader.exec_module(mod)
    return mod


_IMPORT_RE = re.compile(r"^\s*(?:from\s+(\w+)\s+import|import\s+(\w+))", re.M)


@functools.cache
def _closure(name: str) -> tuple[tuple[str, str], ...]:
    """(name, source) of a library module and every library file it imports, read once per run."""
    out: dict[str, str] = {}
    stack = [name]
    while stack:
        n = stack.pop()
        if n in out:
            continue
        out[n] = src = (LIBRARY / f"{n}.py").read_text(encoding="utf-8")
        for a, b in _IMPORT_RE.findall(src):
            dep = a or b
            if (LIBRARY / f"{dep}.py").is_file():
                stack.append(dep)
    return tuple(out.items())


def module_sources(name: str, have: set[str]) -> dict[str, str]:
    """The module's source and those of the library files it imports, minus what the worker has."""
    return {n: src for n, src in _closure(name) if n not in have}


class Runner:
    def __init__(
        self,
        inventory: Inventory,
        *,
        extra_vars: dict | None = None,
        check: bool = False,
        diff: bool = False,
        tags: set[str] | None = None,
        skip_tags: set[str] | None = None,
        forks: int = 8,
        limit: str | None = None,
        console=None,
        lock_wait: float = 60.0,
    ) -> None:
        self.inventory = inventory
        self.extra_vars = extra_vars or {}
        self.check = check
        self.diff = diff
        self.tags = tags or set()
        self.skip_tags = skip_tags or set()
        self.forks = max(1, forks)
        self.limit = limit
        self.console = console
        self.templar = Templar()
        self.states: dict[str, HostState] = {}
        self.results: list[TaskResult] = []
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self.secrets = Secrets()
        self.lock_wait = max(0.0, float(lock_wait))
        self._lock_record = {
            "control_node": socket.gethostname(),
            "user": getpass.getuser(),
            "pid": os.getpid(),
            "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "run_id": uuid.uuid4().hex,  # two inventory names of one machine share this run's lock
        }
        self._groups = {g: inventory.hosts_in(g) for g in inventory.groups}
        self._refs_cache: dict[str, set[str]] = {}

    # -- planning ---------------------------------------------------------------------------------
    def hosts_for(self, play: Play) -> list[str]:
        hosts = self.inventory.select(play.hosts, where=f"{play.source}: play '{play.name}' hosts")
        if self.limit:
            allowed = set(self.inventory.select(self.limit, where="--limit/--host/--group"))
            hosts = [h for h in hosts if h in allowed]
        return hosts

    def task_selected(self, task: Task) -> bool:
        if "always" in task.tags:
            return not (self.skip_tags & task.tags - {"always"})
        if self.tags and not (self.tags & task.tags):
            return False
        return not (self.skip_tags & task.tags)

    def preflight(self, plays: list[Play]) -> None:
        """Catch undefined variables and wrongly typed arguments before any host is touched."""
        from jinja2 import meta

        env = self.templar.env
        common = _common_module()
        for play in plays:
            hosts = self.hosts_for(play)
            registered = {t.register for t in play.tasks + play.handlers if t.register}
            set_facts = {k for t in play.tasks + play.handlers if t.module == "set_fact" for k in t.args}
            loop_vars = {t.loop_var for t in play.tasks + play.handlers}
            for hname in hosts:
                host = self.inventory.hosts[hname]
                base = ChainMap(self.extra_vars, play.vars, host.vars, play.defaults)
                known = set(base) | registered | set_facts | loop_vars | MAGIC_VARS | set(env.globals)
                for task in play.tasks + play.handlers:
                    if not self.task_selected(task):
                        continue
                    names = known | set(task.vars) | set(task.role_vars)
                    self._check_undefined(task, names, ChainMap(task.vars, task.role_vars, base), meta, env)
            for task in play.tasks + play.handlers:  # argument types do not depend on the host
                if self.task_selected(task):
                    self._check_static_types(task, common)

    def _check_undefined(self, task: Task, known: set[str], values: ChainMap, meta, env) -> None:
        seen: set[str] = set()

        cache = self._refs_cache

        def refs(value: Any) -> set[str]:
            found: set[str] = set()
            if isinstance(value, str) and is_template(value):
                if value not in cache:  # the same strings recur for every host and task: parse each once
                    try:
                        cache[value] = meta.find_undeclared_variables(env.parse(value))
                    except Exception as exc:
                        raise UserError(f"{task.source} ('{task.name}'): template syntax error in {value!r}: {exc}") from None
                found |= cache[value]
            elif isinstance(value, dict):
                for k, v in value.items():
                    found |= refs(k) | refs(v)
            elif isinstance(value, (list, tuple)):
                for v in value:
                    found |= refs(v)
            return found

        def bare(exprs: list) -> set[str]:
            out: set[str] = set()
            for e in exprs:
                if isinstance(e, str):
                    out |= refs("{{ " + e + " }}")
            return out

        wanted = refs(task.args) | refs(task.loop) | bare(task.when) | bare([task.changed_when, task.failed_when, task.until])
        stack = list(wanted)
        while stack:
            name = stack.pop()
            if name in seen:
                continue
            seen.add(name)
            if name not in known:
                via = "" if name in wanted else " (used by another variable's value)"
                raise UserError(
                    f"{task.source} ('{task.name}'): variable '{name}' is undefined{via}. Define it in the "
                    f"inventory (host or group vars), the role's defaults.yaml or the play's vars, or pass "
                    f"-e {name}=VALUE."
                )
            if name in values:
                stack.extend(refs(values[name]))

    def _check_static_types(self, task: Task, common) -> None:
        spec = module_args_spec(task.module)
        if not spec:
            return
        for name, value in task.args.items():
            if name not in spec or is_template(str(value)):
                continue
            try:
                common.check_args({name: spec[name]}, {name: value}, task.module)
            except common.ModuleError as exc:
                raise UserError(f"{task.source} ('{task.name}'): {exc.msg}") from None

    # -- variables --------------------------------------------------------------------------------
    def variables(self, state: HostState, play: Play, task: Task | None, extra: dict | None = None):
        host = state.host
        magic = {
            "inventory_hostname": host.name,
            "group_names": [g for g in host.groups if g != "all"],
            "groups": self._groups,
            "hostvars": {h: hv.vars for h, hv in self.inventory.hosts.items()},
            "ansible_check_mode": self.check,
            "ansible_diff_mode": self.diff,
            "playbook_dir": str(play.source.parent),
            "omit": None,
        }
        if task is not None and task.role_dir is not None:
            magic["role_path"] = str(task.role_dir)
        # Data layers (never rendered): loop items and `result`, registered results, set_fact values
        # (rendered once when set), facts, magic names. Everything else is template text from files or -e.
        data = (extra or {}, state.registered, state.facts_set, {"facts": state.facts or {}}, magic)
        layers = ChainMap(
            self.extra_vars,
            data[0],
            state.registered,
            state.facts_set,
            data[3],
            task.vars if task else {},
            task.role_vars if task else {},
            play.vars,
            host.vars,
            magic,
            play.defaults,
        )
        return self.templar.view(layers, data)

    def _collect_secrets(self, state: HostState, play: Play) -> None:
        """Remember the values of secret-named variables from every source this play gives the host."""
        views = [(self.variables(state, play, None), None)]
        seen: set[int] = set()
        for task in play.tasks + play.handlers:
            for layer in (task.vars, task.role_vars):
                if id(layer) not in seen and any(is_secret_name(k) for k in layer):
                    seen.add(id(layer))
                    views.append((self.variables(state, play, task), layer))
        for view, layer in views:
            for name in (layer if layer is not None else view):
                if is_secret_name(name):
                    try:
                        self.secrets.add(view[name])
                    except Exception:  # noqa: S112 - undefined or broken: preflight reports it, without the value
                        continue

    def _secret_touched(self, view) -> bool:
        """True when rendering with `view` read a secret-named variable that holds a value."""
        for name in list(getattr(view, "touched", ())):
            if is_secret_name(name):
                try:
                    if has_value(view[name]):
                        return True
                except Exception:  # noqa: S112 - an unrenderable value taints nothing; its task reports the error
                    continue
        return False

    def redact_obj(self, value: Any) -> Any:
        return self.secrets.redact_obj(value)

    def redact(self, text: str) -> str:
        return self.secrets.redact(text)

    # -- connections ------------------------------------------------------------------------------
    def _connect(self, state: HostState) -> None:
        from tenacity import retry, retry_if_exception, stop_after_attempt, wait_exponential

        def transient(exc: BaseException) -> bool:
            return not isinstance(exc, (HostUnreachable, UserError))

        try:
            attempts = max(1, int(state.host.vars.get("dfp_connect_retries", 3)))
        except (TypeError, ValueError):
            raise HostUnreachable(f"dfp_connect_retries of host {state.host.name} must be a whole number") from None

        @retry(
            stop=stop_after_attempt(attempts),
            wait=wait_exponential(multiplier=0.3, max=2),
            retry=retry_if_exception(transient),
            reraise=True,
        )
        def attempt() -> Transport:
            return connect(state.host)

        try:
            transport = attempt()
        except HostUnreachable:
            raise
        except Exception as exc:
            host = state.host
            where = "local" if host.connection == "local" else f"{host.address}:{host.port}"
            reason = f"{type(exc).__name__}: {exc}"
            errors = getattr(exc, "errors", None)  # paramiko's NoValidConnectionsError wraps socket errors
            if isinstance(errors, dict) and errors:
                first = next(iter(errors.values()))
                reason = first.strerror or str(first)
            elif isinstance(exc, OSError) and exc.strerror:
                reason = exc.strerror
            raise HostUnreachable(
                f"cannot reach {host.name} ({where}) after {attempts} attempt(s): {reason}. "
                "Check ansible_host/ansible_port, that sshd runs there and the network path."
            ) from None
        try:
            self._ensure_runtime(transport)
        except WorkerDied as exc:
            transport.close()
            raise HostUnreachable(
                f"the worker did not start on {state.host.name} with '{transport.python()}': {exc}. "
                "Set ansible_python_interpreter to a python3 >= 3.9 on that host."
            ) from None
        state.transport = transport

    def _ensure_runtime(self, transport: Transport) -> None:
        hello = transport.request({"op": "hello", "runtime": runtime.local_key()})
        if hello.get("missing"):
            key, blob = runtime.runtime_for(hello)
            import base64

            reply = transport.request({"op": "runtime", "key": key, "zip": base64.b64encode(blob).decode()})
            if reply.get("missing"):
                raise HostUnreachable(f"could not provide {', '.join(reply['missing'])} on the host")
            runtime.remember_key(key)
        transport.hello = hello  # type: ignore[attr-defined]

    def _call(self, state: HostState, payload: dict, progress=None) -> dict:
        """One request to the host's worker, sent at most once.

        A dropped connection is never answered by sending the request again: the first copy may still be
        running on the host. The host is unreachable for the rest of the run; the next run converges.
        """
        if state.transport is None:
            self._connect(state)
        transport = state.transport
        sources = module_sources(payload["module"], transport.sent_sources) if "module" in payload else {}
        try:
            reply = transport.request(dict(payload, sources=sources), progress)
        except WorkerDied as exc:
            transport.close()
            state.transport = None
            what = f"module {payload['module']}" if "module" in payload else f"'{payload.get('op')}'"
            raise HostUnreachable(
                f"lost the connection to {state.host.name} while it ran {what}: {exc}. The request was sent once "
                "and is not sent again (it may have finished on the host); the host is out of this run. Run again "
                "to converge."
            ) from None
        transport.sent_sources |= set(sources)
        return reply

    # -- the host lock ------------------------------------------------------------------------------
    def _lock_path(self, state: HostState, play: Play) -> str | None:
        """Where this host's lock lives (under dfp_root), or None when the play opts out (read-only plays)."""
        view = self.variables(state, play, None)
        try:
            if not to_bool(view.get("dfp_host_lock", True)):
                return None
            root = view.get("dfp_root")
        except Exception:  # an undefined name in dfp_root: preflight did not need it, so neither do we
            root = None
        if not isinstance(root, str) or not root.strip():
            return NO_ROOT_LOCK
        return f"{root.rstrip('/')}/{LOCK_NAME}"

    def _lock_host(self, state: HostState, play: Play) -> bool:
        """Take the host lock for the whole run; False (host failed, holder named) when another run keeps it."""
        path = self._lock_path(state, play)
        if path is None:
            return True
        started = time.monotonic()
        progress = None
        if self.console:
            progress = lambda msg, h=state.host.name: self.console.progress(h, msg)  # noqa: E731
        record = dict(self._lock_record, playbook=str(play.source))
        try:
            reply = self._call(state, {"op": "lock", "path": path, "wait_s": self.lock_wait, "record": record}, progress)
        except HostUnreachable as exc:
            self._unreachable(state, "Host lock", str(exc))
            return False
        if "error" in reply or "locked" not in reply:
            reply = {"locked": False, "holder": {"error": reply.get("error") or reply.get("result")}}
        duration = time.monotonic() - started
        if not reply["locked"]:
            state.failed = True
            msg = (f"{state.host.name} is locked by another run: {describe_holder(reply.get('holder'))}; waited "
                   f"{self.lock_wait:g} s (--lock-wait). Let that run finish, or wait longer with --lock-wait.")
            self._record(state, TaskResult(state.host.name, "Host lock", None, "-", "failed", False, msg, duration))
            return False
        if reply.get("stale"):
            msg = f"took over the host lock {reply.get('path')} left by a run that died: {describe_holder(reply['stale'])}"
            self._record(state, TaskResult(state.host.name, "Host lock", None, "-", "ok", False, msg, duration,
                                           {"warnings": [msg]}))
        return True

    # -- executing --------------------------------------------------------------------------------
    def run(self, plays: list[Play]) -> list[TaskResult]:
        for play in plays:
            for name in self.hosts_for(play):
                self._collect_secrets(self.states.setdefault(name, HostState(self.inventory.hosts[name])), play)
        try:
            self.preflight(plays)
        except UserError as exc:  # a message may quote a value: never a secret
            raise UserError(self.redact(str(exc))) from None
        self._pool = ThreadPoolExecutor(max_workers=self.forks)
        try:
            for play in plays:
                self.run_play(play)
        finally:
            # Every host at once: each close waits for its worker to exit (a serial loop cost 10-20 ms a host).
            open_states = [s for s in self.states.values() if s.transport is not None]
            if open_states:
                self._parallel(open_states, self._close_host)
            self._pool.shutdown(wait=False, cancel_futures=True)
        return self.results

    @staticmethod
    def _close_host(state: HostState) -> None:
        try:
            state.transport.request({"op": "exit"})
        except Exception:  # noqa: S110 - a host already gone at the end of the run: closing is all that is left
            pass
        state.transport.close()

    def _parallel(self, states: list[HostState], fn) -> list:
        if len(states) == 1:
            return [fn(states[0])]
        return list(self._pool.map(fn, states))

    def run_play(self, play: Play) -> None:
        names = self.hosts_for(play)
        if self.console:
            self.console.play_start(play, names)
        states = []
        for n in names:
            st = self.states.setdefault(n, HostState(self.inventory.hosts[n]))
            if not st.unreachable:
                states.append(st)

        def start(state: HostState) -> None:
            if state.transport is None:
                try:
                    self._connect(state)
                except HostUnreachable as exc:
                    self._unreachable(state, "Gathering facts" if play.gather_facts else "Connecting", str(exc))
                    return
                if not self._lock_host(state, play):
                    return
            if play.gather_facts and state.facts is None and "facts" in modules():
                self._gather_facts(state, play)

        if play.gather_facts and self.console:
            self.console.task_start("Gathering facts", None, [s.host.name for s in states])
        self._parallel(states, start)
        for task in play.tasks:
            if not self.task_selected(task):
                continue
            active = [s for s in states if not s.failed and not s.unreachable]
            if not active:
                break
            if self.console:
                self.console.task_start(task.name, task.role, [s.host.name for s in active])
            self._parallel(active, lambda st, t=task: self.run_task(st, play, t))
        for handler in play.handlers:
            triggers = {handler.name, *handler.listen}
            active = [s for s in states if not s.failed and not s.unreachable and s.notified & triggers]
            if not active:
                continue
            if self.console:
                self.console.task_start(handler.name, handler.role, [s.host.name for s in active], handler=True)
            self._parallel(active, lambda st, t=handler: self.run_task(st, play, t, handler=True))
            for s in active:
                s.notified -= triggers
        if self.console:
            self.console.task_done()

    def _gather_facts(self, state: HostState, play: Play) -> None:
        started = time.monotonic()
        view = self.variables(state, play, None)
        spec = module_args_spec("facts") or {}
        try:
            args = {"nvidia_smi": view.get("nvidia_smi", "nvidia-smi")}
            if "facts_disk_paths" in view:
                args["disk_paths"] = view["facts_disk_paths"]
        except Exception as exc:  # an undefined name in their values
            result = {"failed": True, "msg": f"cannot render nvidia_smi / facts_disk_paths for this host: {exc}"}
        else:
            args = {k: v for k, v in args.items() if k in spec}
            try:
                reply = self._call(state, {"op": "run", "module": "facts", "args": args, "check": False, "diff": False})
            except HostUnreachable as exc:
                self._unreachable(state, "Gathering facts", str(exc))
                return
            result = reply.get("result", {})
        state.facts = result.get("facts", {})
        status = "failed" if result.get("failed") else "ok"
        if status == "failed":
            state.failed = True
        duration = time.monotonic() - started
        self._record(state, TaskResult(state.host.name, "Gathering facts", None, "facts", status, False,
                                       str(result.get("msg", "")), duration, result))

    def _unreachable(self, state: HostState, task_name: str, msg: str) -> None:
        state.unreachable = True
        state.unreachable_msg = msg
        self._record(state, TaskResult(state.host.name, task_name, None, "-", "unreachable", False, msg, 0.0))

    def _record(self, state: HostState, res: TaskResult) -> None:
        """Count, keep and show a result; secrets are masked in everything shown or reported.

        The result shown is a masked copy: the registered one (used by later tasks) stays intact.
        """
        res.msg = self.redact(res.msg)
        if self.secrets:
            res.result = self.redact_obj(res.result)
        state.stats["ignored" if res.ignored else res.status] += 1
        with self._lock:
            self.results.append(res)
        if self.console:
            self.console.host_result(res)

    def run_task(self, state: HostState, play: Play, task: Task, handler: bool = False) -> None:
        started = time.monotonic()
        try:
            res = self._run_task(state, play, task)
        except HostUnreachable as exc:
            self._unreachable(state, task.name, str(exc))
            return
        except (TaskError, UserError) as exc:
            res = {"failed": True, "changed": False, "msg": str(exc)}
        except SecurityError as exc:
            res = {"failed": True, "changed": False, "msg": (
                f"{task.source} ('{task.name}'): the template sandbox refused this task: {exc}. Templates may not "
                "reach Python internals (names starting with '_') nor build huge values; rewrite the expression."
            )}
        except Exception as exc:  # a template or engine error tied to this task
            name = undefined_name(exc)
            if name:
                msg = (
                    f"{task.source} ('{task.name}'): '{name}' is undefined while rendering this task "
                    f"({exc}); define it or guard the task with a `when:`"
                )
            else:
                msg = f"{task.source} ('{task.name}'): {type(exc).__name__}: {exc}"
            res = {"failed": True, "changed": False, "msg": msg}
        duration = time.monotonic() - started
        if res.get("skipped"):
            status = "skipped"
        elif res.get("failed"):
            status = "failed"
        elif res.get("changed"):
            status = "changed"
        else:
            status = "ok"
        ignored = False
        if status == "failed" and task.ignore_errors:
            ignored = True
        elif status == "failed":
            state.failed = True
        if status == "changed" and task.notify:
            state.notified |= set(task.notify)
        msg = res.get("msg", "")
        if task.no_log:
            msg = "(output hidden: no_log)"
            res = {k: res.get(k) for k in ("changed", "failed", "skipped")}
        self._record(
            state,
            TaskResult(
                state.host.name,
                task.name,
                task.role,
                task.module,
                status,
                bool(res.get("changed")),
                str(msg),
                duration,
                res,
                ignored,
                handler,
            ),
        )

    def _run_task(self, state: HostState, play: Play, task: Task) -> dict:
        view = self.variables(state, play, task)
        if task.loop is None:  # a looped task's `when` is evaluated per item (it may use the loop variable)
            for cond in task.when:
                if not self._truth(cond, view):
                    return {"skipped": True, "changed": False, "msg": f"skipped: condition is false: {cond}"}
        if task.loop is None:
            result = self._run_with_retries(state, play, task, None)
        else:
            items = self.templar.render_value(task.loop, view)
            if not isinstance(items, list):
                raise TaskError(f"{task.source} ('{task.name}'): loop must be a list, got {type(items).__name__}")
            results = [self._run_with_retries(state, play, task, {task.loop_var: item}) for item in items]
            result = {
                "results": results,
                "changed": any(r.get("changed") for r in results),
                "failed": any(r.get("failed") for r in results),
                "skipped": bool(results) and all(r.get("skipped") for r in results),
                "msg": "; ".join(str(r.get("msg", "")) for r in results if r.get("failed") or r.get("changed"))
                or f"{len(results)} items ok",
            }
        if task.register:
            state.registered[task.register] = result
        return result

    def _truth(self, expr: Any, view) -> bool:
        return to_bool(self.templar.evaluate(expr, view))

    def _run_with_retries(self, state: HostState, play: Play, task: Task, extra: dict | None) -> dict:
        attempts = 1 + (task.retries if task.retries is not None else (3 if task.until is not None else 0))
        result: dict = {}
        for attempt in range(1, attempts + 1):
            view = self.variables(state, play, task, extra)
            if extra is not None:
                for cond in task.when:
                    if not self._truth(cond, view):
                        return {"skipped": True, "changed": False, "msg": f"skipped: {cond}"}
            result = self._run_once(state, play, task, view)
            result = self._apply_conditions(state, play, task, extra, result)
            if task.until is None:
                break
            check_view = self.variables(
                state, play, task, dict(extra or {}, result=result, **({task.register: result} if task.register else {}))
            )
            if self._truth(task.until, check_view):
                result["attempts"] = attempt
                break
            if attempt < attempts:
                time.sleep(task.delay)
            else:
                result = dict(
                    result,
                    failed=True,
                    attempts=attempt,
                    msg=f"gave up after {attempt} attempts: until '{task.until}' stayed false; last: {result.get('msg', '')}",
                )
        return result

    def _apply_conditions(self, state, play, task, extra, result: dict) -> dict:
        if task.changed_when is None and task.failed_when is None:
            return result
        names = dict(extra or {}, result=result)
        if task.register:
            names[task.register] = result
        view = self.variables(state, play, task, names)
        if task.changed_when is not None:
            result["changed"] = self._truth(task.changed_when, view)
        if task.failed_when is not None:
            failed = self._truth(task.failed_when, view)
            if result.get("failed") and not failed:
                result["msg"] = f"(failure accepted by failed_when) {result.get('msg', '')}"
            result["failed"] = failed
        return result

    def _run_once(self, state: HostState, play: Play, task: Task, view) -> dict:
        check = self.check if task.check_mode is None else bool(task.check_mode)
        args = self.templar.render_value(task.args, view)
        args = {k: v for k, v in args.items() if v is not None or k in ("content",)}
        action = getattr(self, f"_action_{task.module}", None)
        if action is not None and not (task.module == "copy" and "src" not in args):
            return action(state, play, task, args, view, check)
        common = _common_module()
        try:
            common.check_args(module_args_spec(task.module) or {}, args, task.module)
        except common.ModuleError as exc:
            raise TaskError(f"{task.source} ('{task.name}'): {exc.msg}") from None
        return self._module(state, task.module, args, check, task)

    def _module(self, state: HostState, module: str, args: dict, check: bool, task: Task | None = None) -> dict:
        progress = None
        if self.console and task is not None and not task.no_log:
            progress = lambda msg, h=state.host.name: self.console.progress(h, self.redact(msg))  # noqa: E731
        timeout = task.timeout if task is not None else None
        payload = {"op": "run", "module": module, "args": args, "check": check, "diff": self.diff, "timeout_s": timeout}
        reply = self._call(state, payload, progress)
        if "result" not in reply:
            raise TaskError(f"the worker answered without a result: {reply}")
        return reply["result"]

    # -- engine actions (run on the control node) --------------------------------------------------
    def _action_assert(self, state, play, task, args, view, check) -> dict:
        conditions = task.args["that"] if isinstance(task.args["that"], list) else [task.args["that"]]
        for cond in conditions:
            if not self._truth(cond, view):
                return {"failed": True, "changed": False, "msg": args.get("fail_msg") or f"assertion failed: {cond}"}
        return {"changed": False, "msg": args.get("success_msg") or f"all {len(conditions)} assertion(s) passed"}

    def _action_fail(self, state, play, task, args, view, check) -> dict:
        return {"failed": True, "changed": False, "msg": args.get("msg") or "failed as requested"}

    def _action_debug(self, state, play, task, args, view, check) -> dict:
        if "var" in args:  # the expression as written in the playbook, never a rendered (host-derived) string
            value = self.templar.evaluate(task.args["var"], view)
            return {"changed": False, "msg": f"{args['var']} = {value!r}", args["var"]: value}
        return {"changed": False, "msg": str(args.get("msg", "hello"))}

    def _action_set_fact(self, state, play, task, args, view, check) -> dict:
        derived = self._secret_touched(view)  # computed from a secret: the values are secrets too
        for name, value in args.items():
            if derived or is_secret_name(name):
                self.secrets.add(value)
        state.facts_set.update(args)
        return {"changed": False, "msg": f"set {', '.join(args)}", "ansible_facts": args}

    def _resolve_local(self, task: Task, play: Play, src: str, sub: str) -> Path:
        candidates = []
        if os.path.isabs(os.path.expanduser(src)):
            candidates.append(Path(os.path.expanduser(src)))
        if task.role_dir is not None:
            candidates.append(task.role_dir / sub / src)
        candidates += [play.source.parent / sub / src, play.source.parent / src]
        for c in candidates:
            if c.exists():
                return c
        raise TaskError(
            f"{task.source} ('{task.name}'): {sub[:-1]} source '{src}' not found; looked in "
            + ", ".join(str(c) for c in candidates)
        )

    def _action_template(self, state, play, task, args, view, check) -> dict:
        src = self._resolve_local(task, play, args["src"], "templates/")
        content = self.templar.render_file(str(src), view)
        copy_args = {"dest": args["dest"], "content": content}
        for k in ("mode", "owner", "group", "backup"):
            if args.get(k) is not None:
                copy_args[k] = args[k]
        return self._module(state, "copy", copy_args, check, task)

    def _action_copy(self, state, play, task, args, view, check) -> dict:
        """copy with `src:` on the control node: plan on the host, upload what differs, install atomically."""
        src = self._resolve_local(task, play, str(args.pop("src")), "files/")
        dest = str(args["dest"])
        if src.is_dir():
            files = sorted(p for p in src.rglob("*") if p.is_file())
            entries = [(p, str(p.relative_to(src))) for p in files]
            dest_dir = dest
        else:
            if args.get("delete_extra"):
                raise TaskError(
                    f"{task.source} ('{task.name}'): delete_extra needs a folder as src; with a single file "
                    "it would delete the other files beside dest"
                )
            entries = [(src, os.path.basename(dest.rstrip("/")) if not dest.endswith("/") else src.name)]
            dest_dir = os.path.dirname(dest.rstrip("/")) if not dest.endswith("/") else dest
        manifest = []
        for path, rel in entries:
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            manifest.append({"path": rel, "sha256": digest, "mode": "%04o" % (path.stat().st_mode & 0o777)})
        extra = {k: v for k, v in args.items() if k in ("delete_extra",)}
        plan = self._module(state, "copy", {"dest": dest_dir, "manifest": manifest, "phase": "plan", **extra}, check, task)
        if plan.get("failed") or check or not plan.get("would_change"):
            return plan
        staged = {}
        stage_root = f"{dest_dir.rstrip('/')}/.dfp-staging"
        if plan.get("needed"):
            self._module(state, "file", {"path": stage_root, "state": "directory", "mode": "0700"}, False, task)
            by_rel = {rel: (path, m["sha256"]) for (path, rel), m in zip(entries, manifest)}
            for rel in plan["needed"]:
                path, digest = by_rel[rel]
                remote = f"{stage_root}/{digest}"
                try:
                    state.transport.put(str(path), remote)
                except OSError as exc:  # a full disk or a permission on the host: dest is untouched
                    self._module(state, "file", {"path": stage_root, "state": "absent", "recurse": True}, False, task)
                    reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
                    raise TaskError(
                        f"{task.source} ('{task.name}'): uploading {path} to {dest_dir} failed: {reason}. {dest} is "
                        "unchanged; free space or fix the permissions there and run again."
                    ) from None
                staged[rel] = remote
        install = {"dest": dest_dir, "manifest": manifest, "phase": "install", "staged": staged, **extra}
        result = self._module(state, "copy", install, check, task)
        if staged:
            self._module(state, "file", {"path": stage_root, "state": "absent", "recurse": True}, False, task)
        return result
