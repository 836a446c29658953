"""Run plays: hosts in parallel (bounded by forks), tasks in order, one worker per host.

Linear strategy, as in Ansible: each task runs on every active host before the next task starts, so
the output reads as a runbook. A failed host stops; the others go on, unless the play (or the task's block) has
`any_errors_fatal`: then a host failing or unreachable outside a block's rescue stops the play for every host once
that task has finished everywhere (no later task, handler, batch or play). A play with `serial` runs whole (tasks
and handlers, from facts and host lock on) on one batch of hosts after another, and a failed batch stops the
roll: later batches and plays are not run, their hosts never connected (engine/batches.py). What a task
means on one host is engine/strategy.py; the variables it sees, engine/variables.py; the checks before any host is touched,
engine/preflight.py; the worker protocol, engine/client.py.
"""

from __future__ import annotations

import time
from collections import ChainMap
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from engine import become
from engine.batches import host_list, resolve_serial, roll_stops, roll_summary, split_batches
from engine.client import WorkerClient
from engine.errors import HostUnreachable, TaskError, UserError
from engine.hostlock import describe_holder, lock_path, new_record, roots_problem
from engine.inventory import Inventory
from engine.playbook import Block, Play, Task, modules
from engine.preflight import Preflight
from engine.results import HostState, TaskResult
from engine.strategy import TaskExecutor, linked_values
from engine.templating import Templar
from engine.variables import Variables

FACTS = "facts"  # the module gathering facts at the start of a play (gather_facts)


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
        self.tags = tags or set()
        self.skip_tags = skip_tags or set()
        self.forks = max(1, forks)
        self.limit = limit
        self.console = console
        self.lock_wait = max(0.0, float(lock_wait))
        self.templar = Templar()
        self.variables = Variables(inventory, self.extra_vars, self.templar, check=check, diff=diff)
        self.executor = TaskExecutor(self.variables, self.templar, check=check, diff=diff, console=console)
        self.states: dict[str, HostState] = self.variables.states  # one dict: hostvars reads the others' states
        self._fatal: tuple[list[HostState], str] | None = None  # any_errors_fatal: the hosts that stopped the play, the task
        self._rescuable = 0  # how many blocks with a rescue the current task is inside (their failures are not fatal)
        self._pool: ThreadPoolExecutor | None = None
        self._lock_record = new_record()
        # One entry per play run with serial/max_fail_percentage: batches, done, failed, untouched hosts.
        self.rolls: list[dict] = []

    @property
    def results(self) -> list[TaskResult]:
        return self.executor.results

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

    def _state(self, name: str) -> HostState:
        return self.states.setdefault(name, HostState(self.inventory.hosts[name]))

    # -- the run ----------------------------------------------------------------------------------
    def run(self, plays: list[Play]) -> list[TaskResult]:
        self._pool = ThreadPoolExecutor(max_workers=self.forks)
        self._connect_early(plays)
        try:
            for play in plays:
                for name in self.hosts_for(play):
                    self.variables.collect_secrets(self._state(name), play)
            try:
                Preflight(self.inventory, self.extra_vars, self.templar).check(plays, self.hosts_for, self.task_selected)
                serials = [self.serial_for(play) for play in plays]
            except UserError as exc:  # a message may quote a value: never a secret
                raise UserError(self.variables.secrets.redact(str(exc))) from None
            for number, play in enumerate(plays):
                if not self.run_play(play, serials[number], later_plays=plays[number + 1:]):
                    break  # a failed batch stops the whole playbook, as in Ansible
        finally:
            # Every host at once: each close waits for its worker to exit (a serial loop cost 10-20 ms a host).
            open_states = [s for s in self.states.values() if s.client is not None]
            if open_states:
                self._parallel(open_states, lambda s: s.client.close())
            self._close_early()
            self._pool.shutdown(wait=False, cancel_futures=True)
        return self.results

    def _connect_early(self, plays: list[Play]) -> None:
        """Reach the first play's hosts while the playbook is checked (WorkerClient.connect changes nothing on a
        host). Not for rolling plays: a host of a later batch is not contacted before its turn."""
        self._early: dict = {}
        if not plays or any(p.serial is not None or p.max_fail_percentage is not None for p in plays):
            return
        assert self._pool is not None  # noqa: S101 - made by run() first
        for name in self.hosts_for(plays[0]):
            self._early[name] = self._pool.submit(WorkerClient.connect, self.inventory.hosts[name])

    def _close_early(self) -> None:
        """Connections made early for hosts the run never started (a playbook refused by the checks)."""
        for future in self._early.values():
            if not future.cancel():  # running or done: close it when it is there, without waiting for it
                future.add_done_callback(lambda f: f.exception() is None and f.result().transport.close())
        self._early.clear()

    def _open_client(self, name: str) -> WorkerClient:
        early = self._early.pop(name, None)
        return early.result().start() if early is not None else WorkerClient.open(self.inventory.hosts[name])

    def _parallel(self, states: list[HostState], fn) -> list:
        if len(states) == 1:
            return [fn(states[0])]
        assert self._pool is not None  # noqa: S101 - set by run() before any play
        return list(self._pool.map(fn, states))

    def serial_for(self, play: Play) -> list | None:
        """The play's batch sizes, its templates rendered with -e, the play's vars and its roles' defaults."""
        if play.serial is None:
            return None
        view = self.templar.view(ChainMap(self.extra_vars, play.vars, play.defaults))
        return resolve_serial(play.serial, lambda item: self.templar.render_value(item, view),
                              f"{play.source}: play '{play.name}'")

    def run_play(self, play: Play, serial: list | None = None, later_plays: Sequence[Play] = ()) -> bool:
        """Run a play; False when a failed batch stopped its roll, or any_errors_fatal the play (the plays after it
        are not run)."""
        names = self.hosts_for(play)
        self._fatal = None
        self.variables.begin_play(play, names)
        if serial is None and play.max_fail_percentage is None:
            self._run_batch(play, names, play)
            return self._stop_if_fatal(play, names, later_plays)
        batches = split_batches([n for n in names if self._state(n).active], serial)
        if not batches and self.console:
            self.console.play_start(play, [])
        for number, batch in enumerate(batches, start=1):
            label = f"{play.name} (batch {number} of {len(batches)}: {host_list(batch)})" if len(batches) > 1 else play.name
            self._run_batch(play, batch, replace(play, name=label))
            if self._fatal is not None:
                self._record_roll(play, batches, number, [h for b in batches[number:] for h in b], stopped=True)
                # the batches that finished are not 'stopped': only this batch and the later ones
                return self._stop_if_fatal(play, [h for b in batches[number - 1:] for h in b], later_plays)
            failed_now = [h for h in batch if not self._state(h).active]
            if roll_stops(len(batch), len(failed_now), play.max_fail_percentage):
                self._stop_roll(play, batches, number, len(failed_now), [p.name for p in later_plays])
                return False
        self._record_roll(play, batches, len(batches), [], stopped=False)
        return True

    def _record_roll(self, play: Play, batches: list[list[str]], ran: int, untouched: list[str], stopped: bool
                     ) -> tuple[list, list]:
        reached = [h for batch in batches[:ran] for h in batch]
        done = [h for h in reached if self._state(h).active]
        failed = [h for h in reached if not self._state(h).active]
        self.rolls.append({"play": play.name, "batches": batches, "batches_run": ran, "done": done, "failed": failed,
                           "untouched": untouched, "stopped": stopped})
        return done, failed

    def _stop_roll(self, play: Play, batches: list[list[str]], number: int, failed_now: int, later: list[str]) -> None:
        """Say which hosts the roll did, failed and left untouched: a skipped 'Rolling update' result per untouched host."""
        untouched = [h for batch in batches[number:] for h in batch]
        done, failed = self._record_roll(play, batches, number, untouched, stopped=True)
        msg = roll_summary(play.name, number, len(batches), failed_now, len(batches[number - 1]),
                           play.max_fail_percentage, done, failed, untouched, later)
        self._record_skipped("Rolling update", msg, untouched)

    def _record_skipped(self, task: str, msg: str, hosts: list[str]) -> None:
        """Why a play ended early, shown once and recorded as a skipped `task` result on each host it left."""
        if self.console:
            self.console.task_start(msg, None, hosts)
        for host in hosts:
            self.executor.record(self._state(host), TaskResult(host, task, None, "-", "skipped", False, msg, 0.0))
        if self.console:
            self.console.task_done()

    def _run_batch(self, play: Play, names: list[str], banner: Play) -> None:
        """The whole play on these hosts: connection, lock and facts, then tasks, then handlers."""
        if self.console:
            self.console.play_start(banner, names)
        states = [st for st in map(self._state, names) if not st.unreachable]
        if play.gather_facts and self.console:
            self.console.task_start("Gathering facts", None, [s.host.name for s in states])
        self.variables.publish(play)
        active = [s for s in states if s.active]
        self._parallel(states, lambda st: self._start_host(st, play))
        if play.any_errors_fatal:
            self._note_fatal(active, None)
        self._run_items(states, play, play.tasks)
        for handler in play.handlers:
            if self._fatal is not None:
                break
            triggers = {handler.name, *handler.listen}
            active = [s for s in states if s.active and s.notified & triggers]
            if active:
                self._run_on(active, play, handler, handler=True)
                for s in active:
                    s.notified -= triggers
        if self.console:
            self.console.task_done()

    def _run_items(self, states: list[HostState], play: Play, items: list) -> None:
        """Tasks and blocks in order, each on the hosts of `states` still active."""
        for item in items:
            if self._fatal is not None or not any(s.active for s in states):
                return
            if isinstance(item, Block):
                self._run_block(states, play, item)
            elif self.task_selected(item):
                self._run_on([s for s in states if s.active], play, item)

    def _run_block(self, states: list[HostState], play: Play, block: Block) -> None:
        """block, then rescue on the hosts that failed in it, then always on every host that entered it."""
        entered = [s for s in states if s.active]
        self._rescuable += bool(block.rescue)
        try:
            self._run_items(entered, play, block.block)
        finally:
            self._rescuable -= bool(block.rescue)
        failed = [s for s in entered if s.failed and not s.unreachable]
        if block.rescue and failed and self._fatal is None:
            for s in failed:
                self.executor.rescue(s)
            self._run_items(failed, play, block.rescue)
        if block.always and self._fatal is None:
            still_failed = {id(s) for s in entered if s.failed}
            for s in entered:
                s.failed = False  # always runs on failed hosts too; they stay failed afterwards
            self._run_items([s for s in entered if not s.unreachable], play, block.always)
            for s in entered:
                s.failed = s.failed or id(s) in still_failed

    def _run_on(self, states: list[HostState], play: Play, task: Task, handler: bool = False) -> None:
        if self.console:
            self.console.task_start(task.name, task.role, [s.host.name for s in states], handler=handler)
        self.variables.publish(play)  # hostvars and ansible_play_hosts as they are now, for the whole task
        self._parallel(states, lambda st: self.executor.run_task(st, play, task, handler=handler))
        if play.fatal(task):
            self._note_fatal(states, task.name)

    # -- any_errors_fatal -------------------------------------------------------------------------------
    def _note_fatal(self, states: list[HostState], task: str | None) -> None:
        """After a step on `states` (all active when it began): the hosts it failed stop the play, unless a block's
        rescue will take them (a host unreachable is never rescued)."""
        if self._fatal is not None:
            return
        stopped = [s for s in states if s.unreachable or (s.failed and not self._rescuable)]
        if stopped:
            first = stopped[0].last_failure
            self._fatal = (stopped, task or (first.task if first is not None else "Connecting"))

    def _stop_if_fatal(self, play: Play, names: list[str], later_plays: Sequence[Play]) -> bool:
        """True when the play ran to its end; else say which host and task stopped it, with a skipped 'Play
        stopped' result for every host it left (the console and the reports show it), and stop the playbook."""
        if self._fatal is None:
            return True
        culprits, task = self._fatal
        left = [n for n in names if self._state(n).active]
        first = culprits[0]
        how = "was unreachable at" if first.unreachable else "failed"
        others = ", ".join(s.host.name for s in culprits[1:])
        msg = (f"Play '{play.name}' stopped (any_errors_fatal): host {first.host.name} {how} task '{task}'"
               f"{f' (so did {others})' if others else ''}. No later task or handler ran on any host; stopped on: "
               f"{host_list(left)}.")
        if later_plays:
            msg += f" Plays not run: {', '.join(p.name for p in later_plays)}."
        self._record_skipped("Play stopped", self.variables.secrets.redact(msg), left)
        return False

    # -- one host's start: connection, lock, facts ------------------------------------------------------
    def _start_host(self, state: HostState, play: Play) -> None:
        if state.client is None:
            try:
                state.client = self._open_client(state.host.name)
            except HostUnreachable as exc:
                self.executor.unreachable(state, "Gathering facts" if play.gather_facts else "Connecting", str(exc))
                return
            if not self._play_become(state, play) or not self._lock_host(state, play):
                return
        elif not self._play_become(state, play):
            return
        if play.gather_facts and state.facts is None and FACTS in modules():
            self._gather_facts(state, play)

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
            self.executor.record(state, TaskResult(state.host.name, "Host lock", None, "-", "ok", False, msg, duration,
                                                   {"warnings": [msg]}))
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
        status = "failed" if result.get("failed") else "ok"
        if status == "failed":
            state.failed = True
        self.executor.record(state, TaskResult(state.host.name, "Gathering facts", None, "facts", status, False,
                                               str(result.get("msg", "")), time.monotonic() - started, result))
