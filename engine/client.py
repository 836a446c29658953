"""The client side of the host worker's protocol (engine/worker.py): one WorkerClient per host per run.

    hello    -> python, platform, missing runtime packages      (once, when the client opens)
    runtime  -> dflash_host (psutil/tenacity) unpacked on the host (only when hello says they are missing)
    lock     -> the host lock held for the run                   (engine/hostlock.py)
    run      -> one module call; the task module's own source travels with its first call
    exit     -> the worker releases the lock and exits

Every request is sent once. A connection that drops while a request is out is not reopened: the host
is unreachable for the rest of the run (the first copy may still be running there).
"""

from __future__ import annotations

import base64
import functools
from typing import Callable

from engine import runtime
from engine.errors import HostUnreachable, TaskError, UserError
from engine.inventory import Host
from engine.modulespec import LIBRARY
from engine.transport import Transport, WorkerDied, connect

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


def _reason(exc: Exception) -> str:
    """The socket-level reason of a failed connect (paramiko wraps it in NoValidConnectionsError)."""
    errors = getattr(exc, "errors", None)
    if isinstance(errors, dict) and errors:
        first = next(iter(errors.values()))
        return first.strerror or str(first)
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return f"{type(exc).__name__}: {exc}"


def _open_transport(host: Host) -> Transport:
    """Connect with retries (tenacity) for transient failures; refusals (bad key, auth) fail at once."""
    from tenacity import retry, retry_if_exception, stop_after_attempt, wait_exponential

    attempts = _connect_attempts(host)

    @retry(stop=stop_after_attempt(attempts), wait=wait_exponential(multiplier=0.3, max=2), reraise=True,
           retry=retry_if_exception(lambda e: not isinstance(e, (HostUnreachable, UserError))))
    def attempt() -> Transport:
        return connect(host)

    try:
        return attempt()
    except HostUnreachable:
        raise
    except Exception as exc:
        where = "local" if host.connection == "local" else f"{host.address}:{host.port}"
        raise HostUnreachable(
            f"cannot reach {host.name} ({where}) after {attempts} attempt(s): {_reason(exc)}. "
            "Check ansible_host/ansible_port, that sshd runs there and the network path."
        ) from None


class WorkerClient:
    """Talks to one host's worker: each request sent once, each task module's source shipped once."""

    def __init__(self, host: Host, transport: Transport) -> None:
        self.host = host
        self.transport = transport
        self.sent_sources: set[str] = set()
        self.hello: dict = {}

    @classmethod
    def open(cls, host: Host) -> WorkerClient:
        """Connect, start the worker, and give it the runtime packages it lacks."""
        client = cls(host, _open_transport(host))
        try:
            client._ensure_runtime()
        except WorkerDied as exc:
            client.transport.close()
            raise HostUnreachable(
                f"the worker did not start on {host.name} with '{client.transport.python()}': {exc}. "
                "Set ansible_python_interpreter to a python3 >= 3.9 on that host."
            ) from None
        return client

    def _ensure_runtime(self) -> None:
        self.hello = self.transport.request({"op": "hello", "runtime": runtime.local_key()})
        if self.hello.get("missing"):
            key, blob = runtime.runtime_for(self.hello)
            reply = self.transport.request({"op": "runtime", "key": key, "zip": base64.b64encode(blob).decode()})
            if reply.get("missing"):
                raise HostUnreachable(f"could not provide {', '.join(reply['missing'])} on {self.host.name}")
            runtime.remember_key(key)

    def request(self, payload: dict, progress: Progress | None = None) -> dict:
        """Send one request, once; a dropped connection makes the host unreachable (HostUnreachable)."""
        try:
            return self.transport.request(payload, progress)
        except WorkerDied as exc:
            self.transport.close()
            what = f"module {payload['module']}" if "module" in payload else f"'{payload.get('op')}'"
            raise HostUnreachable(
                f"lost the connection to {self.host.name} while it ran {what}: {exc}. The request was sent once "
                "and is not sent again (it may have finished on the host); the host is out of this run. Run again "
                "to converge."
            ) from None

    def run(self, module: str, args: dict, *, check: bool, diff: bool, timeout_s: float | None = None,
            progress: Progress | None = None) -> dict:
        """One module call on the host; its result dict."""
        payload = {"op": "run", "module": module, "args": args, "check": check, "diff": diff, "timeout_s": timeout_s}
        if module not in self.sent_sources:
            payload["source"] = module_source(module)
        reply = self.request(payload, progress)
        self.sent_sources.add(module)
        if "result" not in reply:
            raise TaskError(f"the worker on {self.host.name} answered without a result: {reply}")
        return reply["result"]

    def lock(self, path: str, wait_s: float, record: dict, progress: Progress | None = None) -> dict:
        """Take the host lock: {"locked", "holder" | "stale" | "shared_with", "path"}."""
        reply = self.request({"op": "lock", "path": path, "wait_s": wait_s, "record": record}, progress)
        if "locked" not in reply:
            return {"locked": False, "holder": {"error": reply.get("error") or reply.get("result")}}
        return reply

    def put(self, local: str, remote: str) -> None:
        self.transport.put(local, remote)

    def close(self) -> None:
        """Ask the worker to exit (it releases the host lock), then close the connection."""
        try:
            self.transport.request({"op": "exit"})
        except Exception:  # noqa: S110 - a host already gone at the end of the run: closing is all that is left
            pass
        self.transport.close()
