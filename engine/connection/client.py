"""The client side of the host worker's protocol (engine/connection/worker.py): one WorkerClient per host per run.

    hello    -> python, platform, missing runtime packages      (once, when the client opens)
    runtime  -> dflash_host (psutil/tenacity) unpacked on the host (only when hello says they are missing)
    lock     -> the host lock held for the run                   (engine/connection/hostlock.py)
    run      -> one module call; the task module's own source travels with its first call
    put      -> a file's bytes, in chunks (only to a become worker; the login user's files go by SFTP)
    exit     -> the worker releases the lock and exits

Become (engine/connection/become.py): a second worker per become identity, started through sudo on another channel of
the same connection the first time a call needs it, with its own hello/runtime (the runtime cache is per
user). Which worker a call goes to: the identity set for the current task (`acting_as`), else the play's
(`for_play`: host lock and facts), else the login user's.

Every request is sent once. A connection that drops while a request is out is not reopened: the host
is unreachable for the rest of the run (the first copy may still be running there). A host that goes silent
(nothing, not even the worker's beat, for `dfp_silent_s` seconds, or no answer within a task's `timeout` and a
margin: engine/connection/transport.py) is out of the run in the same way, its connection closed, which ends its worker and
the task's processes on the host once the close reaches it.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import time
from collections.abc import Iterator
from typing import Callable

from engine.connection import runtime
from engine.connection.become import Become, BecomeError, start_become
from engine.connection.connect import connect
from engine.connection.connection_vars import rendered_host
from engine.connection.ssh_connect import failure_reason
from engine.connection.transport import HostSilent, Transport, WorkerDied
from engine.errors import HostUnreachable, TaskError, UserError
from engine.inventory.manager import Host
from engine.playbook.modulespec import LIBRARY

NOT_RETRIED = (HostUnreachable, UserError)  # refusals (host key, auth, bad settings): retrying cannot help
FIRST_RETRY_WAIT_S = 0.3  # after a failed first connect; each later wait doubles, up to 2 s
PUT_CHUNK = 4 << 20  # bytes per `put` request to a become worker (5.3 MiB of base64 on one JSON line)
_UNSET = object()

Progress = Callable[[str], None]


@functools.cache
def module_source(name: str) -> str:
    """A task module's source, read once per run. Only this file travels with a run request: its
    helpers (dflash_host) are part of the runtime the host already has."""
    return (LIBRARY / f"{name}.py").read_text(encoding="utf-8")


def _connect_attempts(host: Host) -> int:
    try:
        return max(1, int(host.vars.get("dfp_connect_retries", 3)))
    except (TypeError, ValueError):
        raise HostUnreachable(f"dfp_connect_retries of host {host.name} must be a whole number") from None


def _open_transport(host: Host) -> Transport:
    """Connect with retries (tenacity) for transient failures; refusals (bad key, auth) fail at once."""
    attempts = _connect_attempts(host)
    try:
        try:
            return connect(host)
        except NOT_RETRIED:
            raise
        except Exception:
            if attempts == 1:
                raise
        time.sleep(FIRST_RETRY_WAIT_S)
        return _retry_connect(host, attempts - 1)
    except HostUnreachable:
        raise
    except Exception as exc:
        where = "local" if host.connection == "local" else f"{host.address}:{host.port}"
        raise HostUnreachable(
            f"cannot reach {host.name} ({where}) after {attempts} attempt(s): {failure_reason(exc)}. "
            "Check ansible_host/ansible_port, that sshd runs there and the network path."
        ) from None


def _retry_connect(host: Host, attempts: int) -> Transport:
    """The attempts after a failed first one, waiting 0.6, 1.2, 2, 2 ... s. Tenacity is imported only here:
    importing it costs about 15 ms of every run's start, and most connections succeed at once."""
    from tenacity import retry, retry_if_exception, stop_after_attempt, wait_exponential

    @retry(stop=stop_after_attempt(attempts), wait=wait_exponential(multiplier=2 * FIRST_RETRY_WAIT_S, max=2),
           reraise=True, retry=retry_if_exception(lambda e: not isinstance(e, NOT_RETRIED)))
    def attempt() -> Transport:
        return connect(host)

    return attempt()


class _Channel:
    """One worker on the host (the login user's, or one per become identity) and what it has been sent."""

    def __init__(self, transport: Transport, user: str) -> None:
        self.transport = transport
        self.user = user  # "" for the login user
        self.sent_sources: set[str] = set()
        self.hello: dict = {}


class WorkerClient:
    """Talks to one host's workers: each request sent once, each task module's source shipped once per worker."""

    def __init__(self, host: Host, transport: Transport) -> None:
        self.host = host
        self.transport = transport
        self._login = _Channel(transport, "")
        self._become: dict[str, _Channel] = {}
        self._refused: dict[str, str] = {}  # become user -> sudo's refusal: not asked again in this run
        self._play_become: Become | None = None
        self._acting: object = _UNSET

    @property
    def hello(self) -> dict:
        return self._login.hello

    @property
    def sent_sources(self) -> set[str]:
        return self._login.sent_sources

    @classmethod
    def connect(cls, host: Host) -> WorkerClient:
        """Reach the host and start the worker, which then waits: nothing is read or written there yet, so this
        may run while the playbook is still being checked (start() follows once it passed)."""
        host = rendered_host(host)
        return cls(host, _open_transport(host))

    def start(self) -> WorkerClient:
        """Greet the worker and give it the runtime packages it lacks."""
        try:
            self._ensure_runtime(self._login)
        except WorkerDied as exc:
            self.transport.close()
            raise HostUnreachable(
                f"the worker did not start on {self.host.name} with '{self.transport.python()}': {exc}. "
                "Set ansible_python_interpreter to a python3 >= 3.9 on that host."
            ) from None
        return self

    @classmethod
    def open(cls, host: Host) -> WorkerClient:
        """Connect, start the worker, and give it the runtime packages it lacks."""
        return cls.connect(host).start()

    def _ensure_runtime(self, channel: _Channel) -> None:
        channel.hello = channel.transport.request({"op": "hello", "runtime": runtime.local_key(),
                                                   "beat_s": channel.transport.beat_s})
        if channel is self._login and channel.hello.get("executable"):
            self.transport.discovered = channel.hello["executable"]  # a become worker starts the same python
        if channel.hello.get("missing"):
            key, blob = runtime.runtime_for(channel.hello)
            reply = channel.transport.request({"op": "runtime", "key": key, "zip": base64.b64encode(blob).decode()})
            if reply.get("missing"):
                raise HostUnreachable(f"could not provide {', '.join(reply['missing'])} on {self.host.name}")
            runtime.remember_key(key)

    # -- become -------------------------------------------------------------------------------------
    def for_play(self, become: Become | None) -> None:
        """The identity of the play's own calls (host lock, facts), its worker started now, so that sudo's
        refusal (BecomeError, a TaskError) fails the host before the lock is taken."""
        self._play_become = become
        self._channel(become)

    @contextlib.contextmanager
    def acting_as(self, become: Become | None) -> Iterator[None]:
        """Calls made inside go to `become`'s worker (a task's identity; None: the login user)."""
        previous, self._acting = self._acting, become
        try:
            yield
        finally:
            self._acting = previous

    def _current(self) -> Become | None:
        return self._play_become if self._acting is _UNSET else self._acting  # type: ignore[return-value]

    def _channel(self, become: Become | None) -> _Channel:
        """The worker for an identity, started the first time it is needed; BecomeError when sudo refuses."""
        if become is None:
            return self._login
        channel = self._become.get(become.user)
        if channel is not None:
            return channel
        if become.user in self._refused:
            raise BecomeError(self._refused[become.user])
        try:
            spawned = start_become(self.transport, become)
        except BecomeError as exc:
            self._refused[become.user] = str(exc)
            raise
        channel = _Channel(spawned, become.user)
        try:
            self._ensure_runtime(channel)
        except WorkerDied as exc:
            spawned.close()
            raise BecomeError(f"the worker started as {become.user} through sudo on {self.host.name} died at once: "
                              f"{exc}. Check that '{spawned.python()}' runs for that user.") from None
        self._become[become.user] = channel
        return channel

    # -- requests -----------------------------------------------------------------------------------
    def request(self, payload: dict, progress: Progress | None = None, channel: _Channel | None = None,
                timeout_s: float | None = None) -> dict:
        """Send one request, once; a dropped connection or a silent host makes the host unreachable
        (HostUnreachable). `timeout_s`: the task's timeout, which bounds the wait for the answer too."""
        channel = channel or self._channel(self._current())
        try:
            return channel.transport.request(payload, progress, timeout_s)
        except WorkerDied as exc:
            channel.transport.close()
            what = f"module {payload['module']}" if "module" in payload else f"'{payload.get('op')}'"
            who = f" (as {channel.user}, through sudo)" if channel.user else ""
            happened = (f"{self.host.name}{who} went silent while it ran {what}: {exc}; its connection is closed"
                        if isinstance(exc, HostSilent) else
                        f"lost the connection to {self.host.name}{who} while it ran {what}: {exc}")
            raise HostUnreachable(
                f"{happened}. The request was sent once and is not sent again (it may have finished on the host); the "
                "host is out of this run. Run again to converge."
            ) from None

    def run(self, module: str, args: dict, *, check: bool, diff: bool, timeout_s: float | None = None,
            progress: Progress | None = None, become: object = _UNSET, environment: dict | None = None) -> dict:
        """One module call on the host, by the worker of `become` (default: the current identity), with
        `environment` set in the worker's environment while the module runs; its result."""
        channel = self._channel(self._current() if become is _UNSET else become)  # type: ignore[arg-type]
        payload = {"op": "run", "module": module, "args": args, "check": check, "diff": diff, "timeout_s": timeout_s}
        if environment:
            payload["environment"] = environment
        if module not in channel.sent_sources:
            payload["source"] = module_source(module)
        reply = self.request(payload, progress, channel, timeout_s)
        channel.sent_sources.add(module)
        if "result" not in reply:
            raise TaskError(f"the worker on {self.host.name} answered without a result: {reply}")
        return reply["result"]

    def lock(self, path: str, wait_s: float, record: dict, progress: Progress | None = None) -> dict:
        """Take the host lock: {"locked", "holder" | "stale" | "shared_with", "path"}. A `~` in the path is the login
        user's home, whoever takes the lock: a run with become and one without must lock the same file."""
        home = self._login.hello.get("home")
        if home and (path == "~" or path.startswith("~/")):
            path = home + path[1:]
        reply = self.request({"op": "lock", "path": path, "wait_s": wait_s, "record": record}, progress)
        if "locked" not in reply:
            return {"locked": False, "holder": {"error": reply.get("error") or reply.get("result")}}
        return reply

    def put(self, local: str, remote: str) -> None:
        """A file onto the host as the current identity: by SFTP as the login user, else through its worker."""
        become = self._current()
        if become is None:
            self.transport.put(local, remote)
            return
        channel = self._channel(become)
        with open(local, "rb") as fh:
            first = True
            while True:
                chunk = fh.read(PUT_CHUNK)
                if not chunk and not first:
                    break
                reply = self.request({"op": "put", "path": remote, "append": not first,
                                      "data": base64.b64encode(chunk).decode()}, None, channel)
                if reply.get("error"):
                    raise OSError(reply["error"])
                first = False

    def close(self, keep: bool = True) -> None:
        """Ask every worker to exit (the one holding the host lock releases it), then close the connection. A kept
        connection's worker (ControlPersist) releases the lock and stays for the next run instead, unless not `keep`."""
        for channel in [*self._become.values(), self._login]:
            try:
                if channel.transport.persistent and keep:
                    if channel.transport.request({"op": "release"}).get("kept"):
                        channel.transport.keep()
                else:
                    channel.transport.request({"op": "exit"})
            except Exception:  # noqa: S110 - a host already gone at the end of the run: closing is all that is left
                pass
            channel.transport.close()
