"""Run plays: hosts in parallel (bounded by forks), tasks in order, one worker per host.

Linear strategy, as in Ansible: each task runs on every active host before the next task starts, so
the output reads as a runbook. A failed host stops; the others go on, unless the play (or the task's block) has
`any_errors_fatal`: then a host failing or unreachable outside a block's rescue stops the play for every host once
that task has finished everywhere (no later task, handler, batch or play). A play with `serial` runs whole (tasks
and handlers, from facts and host lock on) on one batch of hosts after another, and a failed batch stops the
roll: later batches and plays are not run, their hosts never connected (engine/run/batches.py). What a task
means on one host is engine/run/task_executor.py; the variables it sees, engine/run/variables.py; the checks before any host is touched,
engine/run/preflight.py; the worker protocol, engine/connection/client.py. The Runner walks plays, batches, blocks and tasks;
one host's start (connection, become, lock, facts) is engine/run/host_start.py's, and why a play ends early
(any_errors_fatal, a stopped roll) engine/run/play_stops.py's.
"""

from __future__ import annotations

import functools
import getpass
import random
import sys
import threading
from collections import ChainMap
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from engine.connection import ssh_lookup_cache
from engine.errors import UserError
from engine.inventory.manager import Inventory
from engine.parsing import ansible_cfg
from engine.playbook.keywords import flag
from engine.playbook.model import Block, Include, Play, Task
from engine.playbook.tasks import IncludeNotFound
from engine.run import fact_store
from engine.run.actions.vars_files import play_vars_files
from engine.run.batches import host_list, resolve_serial, roll_stops, split_batches
from engine.run.delegation import Delegation
from engine.run.handlers import PlayHandlers
from engine.run.host_start import HostStart, reaches_hosts
from engine.run.includes import bring, rounds
from engine.run.play_stops import PlayStops
from engine.run.preflight import Preflight
from engine.run.results import HostState, TaskResult
from engine.run.start_at import StartAt
from engine.run.task_executor import TaskExecutor
from engine.run.variables import Variables
from engine.template.environment import environment
from engine.template.markers import is_template
from engine.template.templar import Templar


def prompt_answers(prompts: list, extra_vars: dict, where: str) -> dict:
    """A play's vars_prompt: -e answers a prompt (nothing is asked); else, on a terminal, the question is asked
    (hidden input unless `private: false`; Enter keeps the default); else the default. No default and no
    terminal: refused, naming the variable and the fix."""
    answers: dict = {}
    for item in prompts:
        name = item["name"]
        if name in extra_vars:
            continue
        default = item.get("default")
        if sys.stdin is not None and sys.stdin.isatty():
            question = f"{item.get('prompt') or name}{f' [{default}]' if default is not None else ''}: "
            private = item.get("private", True) not in (False, "no", "false", "False")
            typed = getpass.getpass(question) if private else input(question)
            answers[name] = typed if typed or default is None else default
        elif default is not None:
            answers[name] = default
        else:
            raise UserError(f"{where}: vars_prompt '{name}' has no default and there is no terminal to ask on; pass "
                            f"-e {name}=VALUE or give the prompt a default")
    return answers


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
        start_at_task: str | None = None,
        force_handlers: bool = False,
    ) -> None:
        self.inventory = inventory
        # --force-handlers, else ANSIBLE_FORCE_HANDLERS or ansible.cfg's (its default there): a play's own wins
        self.force_handlers = force_handlers or ansible_cfg.enabled("force_handlers")
        self._handlers: PlayHandlers | None = None  # the current play's (handlers_of)
        self._shuffled: dict[int, list[str]] = {}  # id(play) -> its hosts in `order: shuffle`, drawn once
        self._vars_loaded: set[int] = set()  # plays whose vars_prompt and vars_files are in their vars
        self.extra_vars = extra_vars or {}
        self.tags = tags or set()
        self.skip_tags = skip_tags or set()
        self.forks = max(1, forks)
        self.limit = limit
        self.console = console
        self.lock_wait = max(0.0, float(lock_wait))
        self.templar = Templar(environment())
        self.variables = Variables(inventory, self.extra_vars, self.templar, check=check, diff=diff)
        if console is not None:
            console.redact = self.variables.secrets.redact  # what the console quotes from the playbook, masked
        self.variables.run_tags = sorted(self.tags) or ["all"]
        self.variables.skip_tags = sorted(self.skip_tags)
        self.variables.set_options(forks=self.forks, verbosity=int(getattr(console, "verbose", 0) or 0), limit=limit)
        self.executor = TaskExecutor(self.variables, self.templar, check=check, diff=diff, console=console)
        self.states: dict[str, HostState] = self.variables.states  # one dict: hostvars reads the others' states
        self.batch_states: list[HostState] = []  # the hosts of the batch running now
        self._pool: ThreadPoolExecutor | None = None
        self.failures_cleared: dict[str, int] = {}  # per host, its failures a clear_host_errors forgot (exit code)
        self.errors_cleared = 0  # how many `meta: clear_host_errors` ran (an always section then forgets its failures)
        self.play_ended = False  # meta: end_play in the current play (its later batches are not run)
        self._states_lock = threading.Lock()  # delegated tasks of several hosts' threads may add a delegate's state
        self._load_lock = threading.Lock()  # includes read when reached (the free strategy's hosts run in threads)
        self.hosts = HostStart(inventory, self.variables, self.templar, self.executor, console, self.lock_wait)
        self.stops = PlayStops(self.executor, self.variables, self._state, console)
        self.start_at = StartAt(start_at_task)
        self.executor.delegation = Delegation(inventory, self._delegate_state, self.hosts, self.templar, self.states)

    @property
    def rolls(self) -> list[dict]:
        return self.stops.rolls

    @property
    def results(self) -> list[TaskResult]:
        return self.executor.results

    # -- planning ---------------------------------------------------------------------------------
    def hosts_for(self, play: Play) -> list[str]:
        hosts = self.inventory.select(play.hosts, where=f"{play.source}: play '{play.name}' hosts")
        if self.limit:
            allowed = set(self.inventory.select(self.limit, where="--limit/--host/--group"))
            hosts = [h for h in hosts if h in allowed]
        return self._ordered(play, hosts)

    def _ordered(self, play: Play, hosts: list[str]) -> list[str]:
        """The play's hosts in its `order` (inventory, reverse_inventory, sorted, reverse_sorted, shuffle: drawn
        once per play, so every look at the play sees the same order)."""
        if play.order == "reverse_inventory":
            return hosts[::-1]
        if play.order in ("sorted", "reverse_sorted"):
            return sorted(hosts, reverse=play.order == "reverse_sorted")
        if play.order == "shuffle":
            drawn = self._shuffled.get(id(play))
            if drawn is None or set(drawn) != set(hosts):
                drawn = self._shuffled[id(play)] = random.sample(hosts, len(hosts))
            return list(drawn)
        return hosts

    def task_selected(self, task: Task) -> bool:
        """Ansible's tag rules: no --tags means `all` (every task but `never` ones); `always` runs unless
        `always` (or `all`) is skipped, or another of its tags is; `never` runs only when one of its tags is asked
        for by name; `tagged` / `untagged` select the tasks with / without tags."""
        return tags_select(task.tags, self.tags or {"all"}, self.skip_tags)

    def listing_selected(self, task: Task) -> bool:
        """What --list-tags lists when no --tags or --skip-tags is given: every task, `never` ones too (as
        ansible-playbook, which then lists with `--tags never,all`)."""
        return tags_select(task.tags, {"never", "all"}, set())

    def resolve_tags(self, plays: list[Play]) -> None:
        """Templated tags (`tags: "{{ x }}"`, on a task, block, role, import or play) rendered once, before any
        task is selected: with -e, the task's and its role's vars, the play's vars and the roles' defaults (no
        host's inventory variables: the selection is the same for every host, as Ansible's --list-tasks)."""
        for play in plays:
            for task in play.all_tasks():
                if any(is_template(tag) for tag in task.tags):
                    task.tags = self._rendered_tags(play, task)

    def _rendered_tags(self, play: Play, task: Task) -> set[str]:
        layers = ChainMap(self.extra_vars, task.vars, task.role_vars, play.vars,
                          {"playbook_dir": str(play.source.parent), "ansible_play_name": play.name}, play.defaults)
        view = self.templar.view(layers)
        out: set[str] = set()
        for tag in task.tags:
            if not is_template(tag):
                out.add(tag)
                continue
            try:
                value = self.templar.render_value(tag, view)
            except Exception as exc:  # undefined, a syntax error: the file and the fix, before any host
                raise UserError(
                    f"{task.source} ('{task.name}'): its tags {tag!r} do not render ({exc}). Tags are rendered before "
                    "the run from -e, the play's, block's, role's and task's vars (not a host's inventory variables); "
                    "define the variable there or write the tag plainly."
                ) from None
            out.update(str(v) for v in (value if isinstance(value, (list, tuple, set)) else [value])
                       if v is not None and str(v).strip())
        return out

    def _state(self, name: str) -> HostState:
        if name not in self.states:
            state = self.states[name] = HostState(self.inventory.host(name))
            kept = fact_store.load(name)  # ANSIBLE_CACHE_PLUGIN=jsonfile: what a former run cached
            if kept:
                state.add_facts(kept)
        return self.states[name]

    def _delegate_state(self, name: str) -> HostState:
        """A delegate's state: an inventory host's own, or the implicit localhost's (made once)."""
        with self._states_lock:
            if name not in self.states:
                host = self.inventory.delegate_host(name)
                assert host is not None  # noqa: S101 - Delegation checked the name
                self.states[name] = HostState(host)
            return self.states[name]

    # -- the run ----------------------------------------------------------------------------------
    def run(self, plays: list[Play]) -> list[TaskResult]:
        self._pool = ThreadPoolExecutor(max_workers=self.forks)
        # A play's `connection` may change how its hosts are reached; one of control-node actions reaches none.
        if plays and plays[0].connection is None and reaches_hosts(plays[0]):
            self.hosts.connect_early(plays, self.hosts_for, self._pool)
        try:
            serials = self.preflight(plays)
            for number, play in enumerate(plays):
                if not self.run_play(play, serials[number], later_plays=plays[number + 1:]):
                    break  # a failed batch stops the whole playbook, as in Ansible
        finally:
            # Every host at once: each close waits for its worker to exit (a serial loop cost 10-20 ms a host).
            open_states = [s for s in self.states.values() if s.client is not None]
            if open_states:
                self._parallel(open_states, lambda s: s.client.close())
            self.hosts.close_early()
            self._pool.shutdown(wait=False, cancel_futures=True)
            ssh_lookup_cache.flush()  # the ssh config lookups this run made, kept for the next run (now, not at exit)
            for name, state in self.states.items():
                fact_store.save(name, state.fact_cache)
        return self.results

    def preflight(self, plays: list[Play]) -> list:
        """Everything checked before any host is touched (secrets known first, so no message shows one); the
        plays' batch sizes. Also all that --syntax-check runs."""
        self.load_play_vars(plays)
        for play in plays:
            for name in self.hosts_for(play):
                self.variables.collect_secrets(self._state(name), play)
        try:
            Preflight(self.inventory, self.extra_vars, self.templar).check(plays, self.hosts_for, self.task_selected)
            return [self.serial_for(play) for play in plays]
        except UserError as exc:  # a message may quote a value: never a secret
            raise UserError(self.variables.secrets.redact(str(exc))) from None

    def load_play_vars(self, plays: list[Play]) -> None:
        """Each play's vars_prompt answers and vars_files, into its vars once (above its own vars, as Ansible's
        precedence), before secrets are collected and anything is checked. Their names render with -e and the
        play's vars: no host's data chooses a file."""
        for play in plays:
            if id(play) in self._vars_loaded or not (play.vars_files or play.vars_prompt):
                continue
            self._vars_loaded.add(id(play))
            where = f"{play.source}: play '{play.name}'"
            prompted = prompt_answers(play.vars_prompt, self.extra_vars, where)
            view = self.templar.view(ChainMap(self.extra_vars, prompted, play.vars, play.defaults))
            files = play_vars_files(play.vars_files, play.source.parent, functools.partial(self._render_in, view), where)
            play.vars = {**play.vars, **prompted, **files}

    def _render_in(self, view, text: str):
        return self.templar.render_value(text, view)

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
        if self.start_at.pending and not self.start_at.in_play(play):
            return True  # --start-at-task: a play before the start task's is not run at all
        if self.start_at.pending:
            play = replace(play, gather_facts=False)  # nor the start task's play's fact gathering, as in Ansible
        names = self.hosts_for(play)
        self.stops.fatal = None
        self.play_ended = False
        self.variables.begin_play(play, names)
        if serial is None and play.max_fail_percentage is None:
            self._run_batch(play, names, play)
            return self.stops.stop_if_fatal(play, names, later_plays)
        batches = split_batches([n for n in names if self._state(n).active], serial)
        if not batches and self.console:
            self.console.play_start(play, [])
        for number, batch in enumerate(batches, start=1):
            label = f"{play.name} (batch {number} of {len(batches)}: {host_list(batch)})" if len(batches) > 1 else play.name
            self._run_batch(play, batch, replace(play, name=label))
            if self.stops.fatal is not None:
                self.stops.record_roll(play, batches, number, [h for b in batches[number:] for h in b], stopped=True)
                # the batches that finished are not 'stopped': only this batch and the later ones
                return self.stops.stop_if_fatal(play, [h for b in batches[number - 1:] for h in b], later_plays)
            failed_now = [h for h in batch if not self._state(h).active]
            if roll_stops(len(batch), len(failed_now), play.max_fail_percentage):
                self.stops.stop_roll(play, batches, number, len(failed_now), [p.name for p in later_plays])
                return False
            if self.play_ended:  # meta: end_play ends the whole play, its later batches too
                self.stops.record_roll(play, batches, number, [h for b in batches[number:] for h in b], stopped=False)
                return True
        self.stops.record_roll(play, batches, len(batches), [], stopped=False)
        return True

    def _run_batch(self, play: Play, names: list[str], banner: Play) -> None:
        """The whole play on these hosts: connection, lock and facts, then tasks, then handlers."""
        if self.console:
            self.console.play_start(banner, names)
        states = [st for st in map(self._state, names) if not st.unreachable]
        self.batch_states = states  # a run_once result reaches all of them (_run_once)
        if play.gather_facts and self.console:
            self.console.task_start("Gathering facts", None, [s.host.name for s in states])
        self.variables.begin_batch(play, names)
        self.variables.publish(play)
        active = [s for s in states if s.active]
        self._use_connection(play, states)
        if reaches_hosts(play):  # as Ansible's, which connects on need
            self._parallel(states, lambda st: self.hosts.start(st, play))
        if play.any_errors_fatal:
            self.stops.note_fatal(active, None)
        for s in states:  # notifications are the play's own: an earlier play's left-overs never run here
            s.ended = False
            s.notified.clear()
            s.pending_handlers.clear()
        if play.strategy == "free" and len(states) > 1:  # each host through the whole play at its own pace
            self._parallel(states, lambda st: self._run_sections([st], play))
        else:
            self._run_sections(states, play)
        if self.console:
            self.console.task_done()

    def _use_connection(self, play: Play, states: list[HostState]) -> None:
        """The play's `connection` keyword for its hosts whose inventory sets no ansible_connection (Ansible: the
        variable wins over the keyword); a host an earlier play reached another way logs in anew."""
        for state in states:
            own = self.inventory.host(state.host.name)
            want = own
            if play.connection is not None and "ansible_connection" not in own.vars:
                want = replace(own, vars={**own.vars, "ansible_connection": play.connection})
            if want.connection != state.host.connection:
                state.host = want
                if state.client is not None:
                    self.hosts.reset(state, play)

    def _run_sections(self, states: list[HostState], play: Play) -> None:
        """pre_tasks, then roles and tasks, then post_tasks, each followed by the handlers notified so far, as
        Ansible flushes them; with force_handlers (the play's, else --force-handlers) also on the hosts that failed
        in that part."""
        forced = self.force_handlers if play.force_handlers is None else play.force_handlers
        start = 0
        for end in [*play.flush_after, len(play.tasks)]:
            entered = [s for s in states if s.running]
            self._run_items(states, play, play.tasks[start:end])
            self._flush_handlers(entered if forced else states, play, forced)
            start = end

    def _flush_handlers(self, states: list[HostState], play: Play, forced: bool = False) -> None:
        """The notified handlers, in the order the play lists them, on the hosts that notified them (after each
        part of the play, or at a `meta: flush_handlers`); `forced`: on the failed ones too (not unreachable).
        Which handlers a notification runs, and when a handler's own notification runs: engine/run/handlers.py."""
        known = self.handlers_of(play)
        for s in states:
            known.queue(s)
            if s.pending_handlers and self.console:
                self.console.debug(f"META: triggered running handlers for {s.host.name}")
        for handler in play.handlers:
            if self.stops.fatal is not None and not forced:
                break
            active = [s for s in states if (s.running or (forced and not s.unreachable and not s.ended))
                      and id(handler) in s.pending_handlers]
            if active:
                for s in active:
                    s.pending_handlers.discard(id(handler))
                self._run_handler(active, play, handler, known)
                for s in active:
                    known.queue(s)

    def _run_handler(self, active: list[HostState], play: Play, handler: Task, known: PlayHandlers) -> None:
        """One notified handler on the hosts that notified it: an include read when notified runs, then what it
        brings; a templated name is shown rendered, a run_once one runs on the first host, as Ansible's."""
        if handler.module == "meta" and handler.args.get("action") == "flush_handlers":
            raise UserError(f"{handler.source}: flush_handlers cannot be used as a handler")  # Ansible's words
        if handler.brings is not None:
            self._run_dynamic(active, play, handler.brings, handler=True)
            return
        shown = known.name_of(handler) or handler.name
        task = replace(handler, name=shown) if shown != handler.name else handler
        if self.run_once_holds(active, play, handler):
            self._run_once(active, play, task, handler=True)
        else:
            self._run_on(active, play, task, handler=True)

    def handlers_of(self, play: Play) -> PlayHandlers:
        """The play's handlers as its notifications find them (made once a play)."""
        if self._handlers is None or self._handlers.handlers is not play.handlers:
            def render_name(handler: Task) -> str:  # the play's variables, no host's: as Ansible renders it
                layers = ChainMap(self.extra_vars, handler.vars, handler.role_vars, play.vars, handler.role_defaults,
                                  play.defaults)
                return self.templar.render_value(handler.name, self.templar.view(layers))

            self._handlers = PlayHandlers(play.handlers, render_name,
                                          self.console.warning if self.console else lambda _text: None)
        return self._handlers

    def run_once_holds(self, states: list[HostState], play: Play, task: Task) -> bool:
        """The task's run_once; a templated one rendered with the first running host's variables, as Ansible's."""
        running = [s for s in states if s.running]
        if not isinstance(task.run_once, str) or not running:
            return bool(task.run_once)
        where = f"{task.source} ('{task.name}')"
        try:
            value = self.templar.render_value(task.run_once, self.variables.view(running[0], play, task))
        except Exception as exc:  # noqa: BLE001 - Ansible's error too: the run cannot choose its hosts
            raise UserError(f"{where}: run_once {task.run_once!r} does not render on {running[0].host.name}: {exc}. "
                            "Define what it reads (a | default(false) keeps it optional).") from None
        return flag(value, where, "run_once")

    def _run_once(self, states: list[HostState], play: Play, task: Task, handler: bool = False) -> None:
        """`run_once`: the task on the first running host only (its variables render it, its `when` decides), and
        what it registered or set with set_fact given to every other running host of the batch, as in Ansible."""
        running = [s for s in states if s.running]
        if not running:
            return
        ran = self._run_on(running[:1], play, task, handler=handler)
        if task.module == "meta":
            self._meta(running, play, task, ran)
        first = running[0]
        registered = {task.register: first.registered[task.register]} if task.register in first.registered else {}
        facts = {n: first.facts_set[n] for n in task.args if n in first.facts_set} if task.module == "set_fact" else {}
        loaded = (ran[0].result.get("ansible_facts") or {}) if task.module == "include_vars" and ran else {}
        included = {n: first.included_vars[n] for n in loaded if n in first.included_vars}
        hidden = first.hidden & {*registered, *facts}  # a no_log task's values stay secret on every host
        # every host of the batch, those an include or a block's `when` left out too (Ansible's hosts cache)
        batch = running if play.strategy == "free" else [s for s in self.batch_states or running if s.running]
        for other in [s for s in batch if s is not first]:
            other.registered.update(registered)
            other.facts_set.update(facts)
            other.included_vars.update(included)
            other.hidden |= hidden

    def _meta(self, states: list[HostState], play: Play, task: Task, ran: list) -> None:
        """What a `meta` task does, on the hosts where it ran (its `when` held): flush_handlers, reset_connection,
        end_host, end_batch and end_play (every host of the batch or play), noop."""
        hit = {r.host for r in ran if r.status == "ok"}
        action = task.args["action"]
        if action == "flush_handlers":
            self._flush_handlers([s for s in states if s.host.name in hit], play)
        elif action == "reset_connection":
            self._parallel([s for s in states if s.host.name in hit and s.client is not None],
                           lambda st: self.hosts.reset(st, play))
        elif action == "end_host":
            for s in states:
                s.ended = s.ended or s.host.name in hit
        elif action == "clear_host_errors" and hit:
            self._clear_host_errors(states)
        elif action in ("end_batch", "end_play") and self._first_ran(states, ran) in hit:
            # as Ansible's, which runs these once: the first host's `when` decides for the whole batch
            for s in states:
                s.ended = True
            self.play_ended = self.play_ended or action == "end_play"  # and no later batch (Ansible 2.12+)

    def _clear_host_errors(self, states: list[HostState]) -> None:
        """`meta: clear_host_errors`: the hosts' failed state is forgotten, so they go on with the play after the
        block; the recap still counts their failures but the exit code does not (as Ansible's); an unreachable host
        stays unreachable."""
        for s in states:
            s.failed = False
            self.failures_cleared[s.host.name] = sum(
                r.status == "failed" and not r.ignored and not r.rescued and r.module != "meta"
                for r in self.executor.results if r.host == s.host.name)
        self.errors_cleared += 1

    @staticmethod
    def _first_ran(states: list[HostState], ran: list) -> str | None:
        """The first host (in the play's order) a task ran on."""
        names = {r.host for r in ran}
        return next((s.host.name for s in states if s.host.name in names), None)

    def _run_items(self, states: list[HostState], play: Play, items: list) -> None:
        """Tasks and blocks in order, each on the hosts of `states` still active."""
        for item in items:
            if self.stops.fatal is not None or not any(s.running for s in states):
                return
            if isinstance(item, Block):
                self._run_block(states, play, item)
            elif isinstance(item, Include):
                self._run_include(states, play, item)
            elif self.start_at.skips(item):
                continue
            elif self.task_selected(item) and self.run_once_holds(states, play, item):
                self._run_once(states, play, item)
            elif self.task_selected(item):
                ran = self._run_on([s for s in states if s.running], play, item)
                if item.module == "meta":
                    self._meta(states, play, item, ran)

    def _run_include(self, states: list[HostState], play: Play, include: Include) -> None:
        """include_tasks / include_role: the include on each running host (its `when` decides there, one ok result
        each), then what it brings on the hosts it reached; not selected by --tags, nothing of it runs."""
        if include.dynamic is not None:
            self._run_dynamic(states, play, include)
            return
        if self.start_at.pending:  # --start-at-task looks inside (the include is read at load)
            self._run_items(states, play, include.tasks)
            return
        if not self.task_selected(include.marker):
            return
        ran = self._run_on(self._include_hosts(states, play, include.marker), play, include.marker)
        for r in ran:  # read at load: what it reached is known already
            self.executor.reaches.take(r.host)
        reached = {r.host for r in ran if r.status == "ok"}
        if reached and include.marker.module == "include_role":
            self.handlers_of(play).reveal(str(include.marker.args.get("name")))
        self._run_items([s for s in states if s.host.name in reached], play, include.tasks)

    def _include_hosts(self, states: list[HostState], play: Play, marker: Task) -> list[HostState]:
        """The hosts an include runs on: every running one, or with run_once the first alone (what it brings then
        runs there only, as Ansible's)."""
        running = [s for s in states if s.running]
        return running[:1] if running and self.run_once_holds(running, play, marker) else running

    def _run_dynamic(self, states: list[HostState], play: Play, include: Include, handler: bool = False) -> None:
        """An include read when reached (a templated name, a loop): the include task on each running host (per
        item), then each file it reached, read once for the hosts that reached it alike and run on them
        (engine/run/includes.py); a file that is not there fails those hosts, naming it."""
        if self.start_at.skips(include.marker) or not self.task_selected(include.marker):
            return
        running = self._include_hosts(states, play, include.marker)
        for s in running:
            self.executor.reaches.take(s.host.name)
        ran = self._run_on(running, play, include.marker, handler=handler)
        reached = {s.host.name: self.executor.reaches.take(s.host.name) for s in running}
        outcome = {r.host: [r] for r in ran}  # per host, the result that stands for each of its reaches
        if include.marker.loop is not None:  # Ansible counts a looped include once per item it reached
            self._count_items(running, include, reached, outcome)
        for reach, members in rounds(running, reached):
            try:
                with self._load_lock:
                    tasks = bring(include, reach)
            except IncludeNotFound as exc:  # Ansible: the hosts that reached it fail; any other load error stops
                self._include_failed(members, outcome, str(exc))  # the run (its parser's errors are fatal there too)
                continue
            if include.marker.module == "include_role":
                self.handlers_of(play).reveal(str(reach.args.get("name")))
            brought = replace(play, tasks=tasks, handlers=[])  # its secret-named vars are secrets before it runs
            for s, _ in members:
                self.variables.collect_secrets(s, brought)
            self._run_items([s for s, _ in members], play, tasks)

    def _count_items(self, states: list[HostState], include: Include, reached: dict, outcome: dict) -> None:
        """A looped include is one ok result per item it reached, as Ansible's "included: ... (item=...)" lines:
        the loop's result stands for the first, one more is recorded for each other."""
        marker = include.marker
        for s in states:
            for reach in reached[s.host.name][1:]:
                what = reach.args.get("file") or reach.args.get("name")
                res = TaskResult(s.host.name, marker.name, marker.role, marker.module, "ok", False, f"included: {what}",
                                 0.0, {"changed": False, **reach.names})
                self.executor.record(s, res)
                outcome.setdefault(s.host.name, []).append(res)

    def _include_failed(self, members: list, outcome: dict, msg: str) -> None:
        """The file a host reached is not there: that reach's result becomes its failure, as Ansible's."""
        for state, index in members:
            results = outcome.get(state.host.name, [])
            if not state.running or index >= len(results):
                continue
            res = results[index]
            state.stats[res.status] -= 1
            res.status, res.msg, res.result = "failed", self.variables.secrets.redact(msg), {"failed": True, "msg": msg}
            self.executor.record_again(state, res)
            state.failed = True

    def _run_block(self, states: list[HostState], play: Play, block: Block) -> None:
        """block, then rescue on the hosts that failed in it, then always on every host that entered it."""
        entered = [s for s in states if s.running]
        self.stops.rescuable += bool(block.rescue)
        try:
            self._run_items(entered, play, block.block)
        finally:
            self.stops.rescuable -= bool(block.rescue)
        failed = [s for s in entered if s.failed and not s.unreachable]
        if block.rescue and failed and self.stops.fatal is None:
            for s in failed:
                self.executor.rescue(s)
            self._run_items(failed, play, block.rescue)
        if block.always:
            # any_errors_fatal stops the play after the always sections it is inside, as Ansible's (a fatal failure
            # fails every host, and a failed host still runs its blocks' always)
            fatal, self.stops.fatal = self.stops.fatal, None
            still_failed = {id(s) for s in entered if s.failed}
            for s in entered:
                s.failed = False  # always runs on failed hosts too; they stay failed afterwards
            cleared = self.errors_cleared
            self._run_items([s for s in entered if not s.unreachable and not s.ended], play, block.always)
            if self.errors_cleared != cleared:  # a meta: clear_host_errors in the always: its hosts go on (a fatal
                still_failed.clear()  # failure's stop of the play too, as Ansible's)
                fatal = None
            for s in entered:
                s.failed = s.failed or id(s) in still_failed
            self.stops.fatal = fatal or self.stops.fatal

    def _fail_into_rescue(self, states: list[HostState]) -> None:
        """any_errors_fatal inside a block with a rescue: one host failing sends every host of the task into the
        rescue, as Ansible's (the others' failure has no result of its own: nothing of theirs is rescued)."""
        if self.stops.rescuable and any(s.failed and not s.unreachable for s in states):
            for s in states:
                if s.running:
                    s.failed, s.last_failure = True, None

    def _run_on(self, states: list[HostState], play: Play, task: Task, handler: bool = False) -> list[TaskResult]:
        """The task on these hosts in parallel; the results it added."""
        before = len(self.executor.results)
        if self.console:
            self.console.task_start(task.name, task.role, [s.host.name for s in states], handler=handler,
                                    source=task.source)
        self.variables.publish(play)  # hostvars and ansible_play_hosts as they are now, for the whole task
        self._parallel(states, lambda st: self.executor.run_task(st, play, task, handler=handler))
        if task.notify:
            for s in states:  # a notification no handler answers: Ansible's error once the task has run
                self.handlers_of(play).check(s)
        if play.fatal(task):
            self._fail_into_rescue(states)
            self.stops.note_fatal(states, task.name)
        return self.executor.results[before:]


UNTAGGED = frozenset({"untagged"})


def tags_select(task_tags: set[str], only: set[str], skip: set[str]) -> bool:
    """Whether a task with `task_tags` runs under --tags `only` (`{"all"}` when none given) and --skip-tags
    `skip`, as Ansible decides it: a task without tags is `untagged`."""
    tags = frozenset(task_tags) or UNTAGGED
    wanted = ("always" in tags or ("all" in only and "never" not in tags) or not tags.isdisjoint(only)
              or ("tagged" in only and tags != UNTAGGED and "never" not in tags))
    if not wanted or not skip:
        return wanted
    if "all" in skip:
        return "always" in tags and "always" not in skip
    return tags.isdisjoint(skip) and not ("tagged" in skip and tags != UNTAGGED)
