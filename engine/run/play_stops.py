"""Why a play ends early, and the record of a rolling play: any_errors_fatal's bookkeeping and the roll's.

any_errors_fatal: after each step the hosts it failed (outside a block's rescue) or left unreachable are
noted; once the step has finished everywhere the play stops for every host, with a skipped 'Play stopped'
result naming the culprit on each host it left. A roll (serial / max_fail_percentage): one record per play
(batches, done, failed, untouched), and a skipped 'Rolling update' result on each host a stopped roll never
reached. Which batch stops a roll is engine/run/batches.py's.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from engine.playbook.model import Play
from engine.run.batches import host_list, roll_summary
from engine.run.results import HostState, TaskResult
from engine.run.task_executor import TaskExecutor
from engine.run.variables import Variables


class PlayStops:
    """The any_errors_fatal state of the play running now, and the records of every roll of the run."""

    def __init__(self, executor: TaskExecutor, variables: Variables, state: Callable[[str], HostState], console) -> None:
        self.executor, self.variables, self._state, self.console = executor, variables, state, console
        self.fatal: tuple[list[HostState], str] | None = None  # the hosts that stopped the play, the task
        self._inside = threading.local()  # per thread: strategy free runs each host's tasks on a thread of its own
        # One entry per play run with serial/max_fail_percentage: batches, done, failed, untouched hosts.
        self.rolls: list[dict] = []

    @property
    def rescuable(self) -> int:
        """How many blocks with a rescue the current task is inside (their failures are not fatal)."""
        return getattr(self._inside, "rescuable", 0)

    @rescuable.setter
    def rescuable(self, value: int) -> None:
        self._inside.rescuable = value

    # -- any_errors_fatal -------------------------------------------------------------------------------
    def note_fatal(self, states: list[HostState], task: str | None) -> None:
        """After a step on `states` (all active when it began): the hosts it failed stop the play, unless a block's
        rescue will take them (a host unreachable is never rescued)."""
        if self.fatal is not None:
            return
        stopped = [s for s in states if s.unreachable or (s.failed and not self.rescuable)]
        if stopped:
            first = stopped[0].last_failure
            self.fatal = (stopped, task or (first.task if first is not None else "Connecting"))

    def stop_if_fatal(self, play: Play, names: list[str], later_plays: Sequence[Play]) -> bool:
        """True when the play ran to its end; else say which host and task stopped it, with a skipped 'Play
        stopped' result for every host it left (the console and the reports show it), and stop the playbook."""
        if self.fatal is None:
            return True
        culprits, task = self.fatal
        left = [n for n in names if self._state(n).active]
        first = culprits[0]
        how = "was unreachable at" if first.unreachable else "failed"
        others = ", ".join(s.host.name for s in culprits[1:])
        msg = (f"Play '{play.name}' stopped (any_errors_fatal): host {first.host.name} {how} task '{task}'"
               f"{f' (so did {others})' if others else ''}. No later task or handler ran on any host; stopped on: "
               f"{host_list(left)}.")
        if later_plays:
            msg += f" Plays not run: {', '.join(p.name for p in later_plays)}."
        self.record_skipped("Play stopped", self.variables.secrets.redact(msg), left)
        return False

    # -- the roll -------------------------------------------------------------------------------------
    def record_roll(self, play: Play, batches: list[list[str]], ran: int, untouched: list[str], stopped: bool
                     ) -> tuple[list, list]:
        reached = [h for batch in batches[:ran] for h in batch]
        done = [h for h in reached if self._state(h).active]
        failed = [h for h in reached if not self._state(h).active]
        self.rolls.append({"play": play.name, "batches": batches, "batches_run": ran, "done": done, "failed": failed,
                           "untouched": untouched, "stopped": stopped})
        return done, failed

    def stop_roll(self, play: Play, batches: list[list[str]], number: int, failed_now: int, later: list[str]) -> None:
        """Say which hosts the roll did, failed and left untouched: a skipped 'Rolling update' result per untouched host."""
        untouched = [h for batch in batches[number:] for h in batch]
        done, failed = self.record_roll(play, batches, number, untouched, stopped=True)
        msg = roll_summary(play.name, number, len(batches), failed_now, len(batches[number - 1]),
                           play.max_fail_percentage, done, failed, untouched, later)
        self.record_skipped("Rolling update", msg, untouched)

    def record_skipped(self, task: str, msg: str, hosts: list[str]) -> None:
        """Why a play ended early, shown once and recorded as a skipped `task` result on each host it left."""
        if self.console:
            self.console.task_start(msg, None, hosts)
        for host in hosts:
            self.executor.record(self._state(host), TaskResult(host, task, None, "-", "skipped", False, msg, 0.0))
        if self.console:
            self.console.task_done()
