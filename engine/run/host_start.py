"""One host's start in a play: its connection (made early while the playbook is checked, where that is
safe), who the play runs as (become), the host lock for the whole run, and the facts.

The Runner calls HostStart.start for every host of a batch, in parallel; a host that cannot be reached, cannot
become, is locked by another run or has a tool root it cannot own is failed here with a result saying why, and
the play goes on without it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from engine.connection import become
from engine.connection.client import WorkerClient
from engine.connection.hostlock import describe_holder, lock_path, new_record, roots_problem
from engine.errors import HostUnreachable, TaskError
from engine.inventory.manager import Inventory
from engine.playbook.model import Block, Include, Play
from engine.playbook.modulespec import modules
from engine.run.actions.catalog import LOCAL_ACTIONS
from engine.run.results import HostState, TaskResult
from engine.run.task_executor import TaskExecutor, linked_values
from engine.run.variables import Variables
from engine.template.secrets import secret_leaves
from engine.template.templar import Templar

FACTS = "facts"  # the module gathering facts at the start of a play (gather_facts)


def reaches_hosts(play: Play) -> bool:
    """Whether the play connects to its hosts: it gathers facts, or a task or handler runs a module there. A play
    of control-node actions only (debug, fail, assert, set_fact, meta, ...) never connects, as in Ansible, so its
    hosts need not exist (`-i host1,host2`)."""
    return play.gather_facts or _needs_hosts(play.tasks + play.handlers)


def _needs_hosts(items: list) -> bool:
    """A module that runs on the hosts, or an include read when reached (what it brings is not known yet)."""
    for item in items:
        if isinstance(item, Block):
            if _needs_hosts(item.block) or _needs_hosts(item.rescue) or _needs_hosts(item.always):
                return True
        elif isinstance(item, Include):
            if item.dynamic is not None or _needs_hosts(item.tasks):
                return True
        elif item.module not in LOCAL_ACTIONS:
            return True
    return False


class HostStart:
    """Connection, become, lock and facts of each host, for one run (the lock's record names this run)."""

    def __init__(self, inventory: Inventory, variables: Variables, templar: Templar, executor: TaskExecutor,
                 console, lock_wait: float) -> None:
        self.inventory, self.variables, self.templar, self.executor = inventory, variables, templar, executor
        self.console = console
        self.lock_wait = lock_wait
        self._lock_record = new_record()
        self._early: dict = {}

    # -- connections ------------------------------------------------------------------------------------
    def connect_early(self, plays: list[Play], hosts_for: Callable[[Play], list[str]], pool: ThreadPoolExecutor) -> None:
        """Reach the first play's hosts while the playbook is checked (WorkerClient.connect changes nothing on a
        host). Not for rolling plays: a host of a later batch is not contacted before its turn."""
        if not plays or any(p.serial is not None or p.max_fail_percentage is not None for p in plays):
            return
        for name in hosts_for(plays[0]):
            self._early[name] = pool.submit(WorkerClient.connect, self.inventory.host(name))

    def close_early(self) -> None:
        """Connections made early for hosts the run never started (a playbook refused by the checks)."""
        for future in self._early.values():
            if not future.cancel():  # running or done: close it when it is there, without waiting for it
                future.add_done_callback(lambda f: f.exception() is None and f.result().transport.close())
        self._early.clear()

    def _open_client(self, state: HostState) -> WorkerClient:
        early = self._early.pop(state.host.name, None)
        return early.result().start() if early is not None else WorkerClient.open(state.host)

    # -- one host's start ----------------------------------------------------------------------------
    def start(self, state: HostState, play: Play, step: str | None = None) -> None:
        """Connect (unless connected), become, lock (on a new connection) and gather facts (each play that asks,
        as Ansible's default `gathering: implicit`); `step` names the task an unreachable host is reported under."""
        if state.client is None:
            try:
                state.client = self._open_client(state)
            except HostUnreachable as exc:
                self.executor.unreachable(state, step or ("Gathering facts" if play.gather_facts else "Connecting"),
                                          str(exc))
                return
            self._say_notes(state)
            if not self._play_become(state, play) or not self._lock_host(state, play):
                return
            state.locked = True
        elif not self._play_become(state, play):
            return
        if play.gather_facts and FACTS in modules():
            self._gather_facts(state, play)

    def reset(self, state: HostState, play: Play) -> None:
        """`meta: reset_connection`: a new login for the rest of the run, so that what changed about the login user
        (a group such as docker or render added, limits, the environment) applies; a kept connection is dropped
        too. The host lock is let go with the old worker and taken again by the new one."""
        old = state.client
        if old is None:
            return
        old.transport.forget()
        state.client, state.locked = None, False
        old.close(keep=False)
        self.start(state, replace(play, gather_facts=False), step="Connecting")  # no second fact gathering

    def _say_notes(self, state: HostState) -> None:
        """What the connection had to say (a kept-connection daemon that did not answer and was bypassed), as
        warnings of a "Connecting" notice: shown as warnings, kept in the reports, counted in no recap column."""
        notes = state.client.transport.notes if state.client is not None else []
        if notes:
            self.executor.notice(TaskResult(state.host.name, "Connecting", None, "-", "ok", False, " ".join(notes), 0.0,
                                            {"warnings": list(notes)}, notice=True))

    def _play_become(self, state: HostState, play: Play) -> bool:
        """Who the play's lock and facts run as (its become keywords, else the host's ansible_become*)."""
        try:
            view = self.variables.view(state, play, None)
            state.client.for_play(become.for_play(play, view, self.templar, self.variables.secrets))
        except HostUnreachable as exc:
            self.executor.unreachable(state, "Become", str(exc))
            return False
        except TaskError as exc:
            state.failed = True
            self.executor.record(state, TaskResult(state.host.name, "Become", None, "-", "failed", False, str(exc), 0.0))
            return False
        return True

    def _lock_host(self, state: HostState, play: Play) -> bool:
        """Take the host lock for the whole run; False (host failed, holder named) when another run keeps it."""
        view = self.variables.view(state, play, None)
        problem = roots_problem(view)
        if problem:  # before the lock: nothing of the tool's is created at a root it cannot own
            state.failed = True
            self.executor.record(state, TaskResult(state.host.name, "Host lock", None, "-", "failed", False,
                                                   f"{problem} Nothing was changed on {state.host.name}.", 0.0))
            return False
        path = lock_path(view)
        if path is None:
            return True
        started = time.monotonic()
        progress = (lambda msg, h=state.host.name: self.console.progress(h, msg)) if self.console else None
        try:
            reply = state.client.lock(path, self.lock_wait, dict(self._lock_record, playbook=str(play.source)), progress)
        except HostUnreachable as exc:
            self.executor.unreachable(state, "Host lock", str(exc))
            return False
        duration = time.monotonic() - started
        if not reply["locked"]:
            state.failed = True
            msg = (f"{state.host.name} is locked by another run: {describe_holder(reply.get('holder'))}; waited "
                   f"{self.lock_wait:g} s (--lock-wait). Let that run finish, or wait longer with --lock-wait.")
            if reply.get("unusable"):
                msg = (f"cannot take the host lock on {state.host.name}: {reply['unusable']}. The lock must be a regular "
                       "file the tool made at that name (never a symlink), writable by the user the play runs as; "
                       "remove what is there, or set dfp_root to a folder of the tool's own.")
            self.executor.record(state, TaskResult(state.host.name, "Host lock", None, "-", "failed", False, msg, duration))
            return False
        if reply.get("stale"):
            msg = f"took over the host lock {reply.get('path')} left by a run that died: {describe_holder(reply['stale'])}"
            self.executor.notice(TaskResult(state.host.name, "Host lock", None, "-", "ok", False, msg, duration,
                                            {"warnings": [msg]}, notice=True))
        return True

    def _gather_facts(self, state: HostState, play: Play) -> None:
        started = time.monotonic()
        view = self.variables.view(state, play, None)
        try:  # the facts module's arguments come from the variables its ARGS link (e.g. nvidia_smi)
            args = {k: v for k, v in linked_values(FACTS, {}, view).items() if v is not None}
        except Exception as exc:  # an undefined name in those variables' values
            result = {"failed": True, "msg": f"cannot render the arguments of {FACTS} for this host: {exc}"}
        else:
            try:
                result = state.client.run(FACTS, args, check=False, diff=False)
            except HostUnreachable as exc:
                self.executor.unreachable(state, "Gathering facts", str(exc))
                return
        facts = result.get("facts")
        state.facts = facts if isinstance(facts, dict) else {}
        self._keep_ansible_facts(state, result.pop("ansible_facts", None))
        status = "failed" if result.get("failed") else "ok"
        if status == "failed":
            state.failed = True
        self.executor.record(state, TaskResult(state.host.name, "Gathering facts", None, "facts", status, False,
                                               str(result.get("msg", "")), time.monotonic() - started, result))

    def _keep_ansible_facts(self, state: HostState, facts: object) -> None:
        """Ansible's facts into the host's fact cache (ansible_facts, ansible_*); what sits under a secret-looking
        name among them (an HF_TOKEN in ansible_env) joins the run's secrets, shown masked wherever it goes."""
        if isinstance(facts, dict):
            self.variables.secrets.add(secret_leaves(facts))
            state.add_facts(facts)
