"""Where `vllm bench serve` runs: in one resident python of the serving environment for a whole measurement,
else one `vllm bench serve` process a run.

A `vllm bench serve` process spends most of its life importing vLLM (about 16 s of every 20 s run on the H200
with 5 s repetitions): a measurement of two servers at two concurrency levels, warm-up and three repetitions
each, starts it 16 times. The resident python imports vLLM's CLI once and runs each request's argv through the
same entry point (`vllm.entrypoints.cli.main.main`, as the `vllm` console script does), so what measures is
still vLLM's own benchmark, its start paid once. Where it cannot start (no vLLM importable by that python, a
stand-in `vllm` script), every run is its own process, as before, and the reason is kept.

The API key travels in the request on the resident's stdin (vllm bench serve reads OPENAI_API_KEY from the
environment at each request), never in argv. vLLM's own output goes to a private log file, read back only
for the tail of a failure. Standard library only.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import subprocess
import tempfile
import time

# Run by the serving environment's python: replies (one JSON line each) on a duplicate of the original stdout;
# fd 1 then points at the log, so that whatever vLLM prints cannot be mistaken for a reply.
DRIVER = r"""
import json, os, sys, traceback
reply = os.fdopen(os.dup(1), "w", buffering=1)
os.dup2(2, 1)
os.environ.pop("VLLM_USE_RUST_BENCH", None)  # it would exec another program in place of this one
try:
    from vllm.entrypoints.cli.main import main
except BaseException as exc:
    reply.write(json.dumps({"ready": False, "error": f"{type(exc).__name__}: {exc}"}) + "\n")
    sys.exit(0)
reply.write(json.dumps({"ready": True}) + "\n")
for line in sys.stdin:
    ask = json.loads(line)
    for name, value in ask["env"].items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    sys.argv = ["vllm", *ask["argv"]]
    code = 0
    try:
        main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    reply.write(json.dumps({"rc": code}) + "\n")
"""


class BenchUnavailable(Exception):
    """vllm bench serve cannot run here or failed: the reason, one line (the built-in client takes over)."""


def tail(text: str, lines: int = 4) -> str:
    """The last non-empty lines of a program's output, on one line (for a failure's reason)."""
    keep = [ln.strip() for ln in text.strip().splitlines() if ln.strip()][-lines:]
    return " | ".join(keep)[-600:]


class Resident:
    """One python of the serving environment with vLLM's CLI imported; runs one argv at a time."""

    def __init__(self, python: str, env: dict, start_timeout_s: float) -> None:
        self.folder = tempfile.mkdtemp(prefix="dfp-bench-process-")
        self.log_path = os.path.join(self.folder, "vllm-bench.log")
        self.log = open(self.log_path, "wb")  # noqa: SIM115 - closed in close(); the python's stderr
        self.buffer = b""
        try:
            self.proc = subprocess.Popen([python, "-c", DRIVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=self.log, env=env, start_new_session=True)
        except OSError as exc:
            self.close()
            raise BenchUnavailable(f"the serving python {python} could not start: {exc}") from None
        answer = self._reply(start_timeout_s, "importing vLLM's CLI")
        if not answer.get("ready"):
            self.close()
            raise BenchUnavailable(f"vLLM's CLI does not import in {python}: {answer.get('error')}")

    def run(self, words: list, env: dict, timeout_s: float) -> None:
        """Run `vllm WORDS` with env's variables set (None: unset); BenchUnavailable with the log's tail if it fails."""
        start = os.path.getsize(self.log_path)  # this run's own lines follow, for a failure's tail
        assert self.proc.stdin is not None  # noqa: S101 - opened with stdin=PIPE
        try:
            self.proc.stdin.write((json.dumps({"argv": words, "env": env}) + "\n").encode())
            self.proc.stdin.flush()
        except OSError as exc:
            raise BenchUnavailable(f"the resident vllm bench serve has gone: {exc}") from None
        code = self._reply(timeout_s, "a run").get("rc")
        if code != 0:
            raise BenchUnavailable(f"vllm bench serve exited {code} without a result: {self._log_tail(start)}")

    def _reply(self, timeout_s: float, what: str) -> dict:
        """The next JSON line on the reply pipe, within timeout_s (the process is ended if none comes)."""
        assert self.proc.stdout is not None  # noqa: S101 - opened with stdout=PIPE
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            ready = select.select([self.proc.stdout], [], [], max(0.0, left))[0] if left > 0 else []
            chunk = os.read(self.proc.stdout.fileno(), 65536) if ready else b""
            if not chunk:
                reason = f"ran longer than {timeout_s:g} s ({what})" if not ready else f"ended during {what}"
                tail_text = self._log_tail(0)
                self.close(kill=True)
                raise BenchUnavailable(f"the resident vllm bench serve {reason}: {tail_text}")
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        try:
            answer = json.loads(line)
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            self.close()
            raise BenchUnavailable(f"the resident vllm bench serve answered {line[:200]!r}")
        return answer

    def _log_tail(self, start: int) -> str:
        try:
            with open(self.log_path, "rb") as fh:
                fh.seek(max(start, os.path.getsize(self.log_path) - 20000))
                return tail(fh.read().decode("utf-8", "replace"))
        except OSError:
            return "(no log)"

    def close(self, kill: bool = False) -> None:
        """End the python: its stdin closed (it returns from its loop), killed if it will not or `kill`."""
        proc = getattr(self, "proc", None)
        if proc is not None and proc.poll() is None:
            if not kill:
                with contextlib.suppress(OSError):
                    proc.stdin.close()
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    kill = True
            if kill:
                proc.kill()
                proc.wait()
        self.log.close()
        shutil.rmtree(self.folder, ignore_errors=True)


class BenchRunner:
    """The runs of one measurement: resident where vLLM's CLI imports, else one `vllm bench serve` process each."""

    def __init__(self, cli: str, python: str, env: dict, timeout_s: float) -> None:
        self.cli, self.python, self.env, self.timeout_s = cli, python, env, timeout_s
        self.resident: Resident | None = None
        self.why_not_resident: str | None = None
        self.runs = {"resident": 0, "own process": 0}

    @property
    def how(self) -> str:
        """How the runs went, for the report: resident, or a process each and why."""
        done = self.runs
        if not done["own process"]:
            return f"one resident process ({done['resident']} runs)" if done["resident"] else "no run"
        return f"{done['resident']} runs resident, {done['own process']} in a process each ({self.why_not_resident})"

    def run(self, words: list, env: dict) -> None:
        """Run `vllm WORDS` with env's variables added (None: unset), resident when it can."""
        if self.resident is None and self.why_not_resident is None:
            try:
                self.resident = Resident(self.python, self.env, self.timeout_s)
            except BenchUnavailable as exc:
                self.why_not_resident = str(exc)
        if self.resident is not None:
            try:
                self.resident.run(words, env, self.timeout_s)
                self.runs["resident"] += 1
                return
            except BenchUnavailable as exc:  # this vLLM may not take a second run in one process: one each from now
                self.resident.close()
                self.resident, self.why_not_resident = None, f"the resident process failed: {exc}"
        self._one_process(words, env)

    def _one_process(self, words: list, env: dict) -> None:
        full = {k: v for k, v in {**self.env, **env}.items() if v is not None}
        try:
            res = subprocess.run([self.cli, *words], capture_output=True, text=True, timeout=self.timeout_s, env=full)
        except subprocess.TimeoutExpired:
            raise BenchUnavailable(f"vllm bench serve ran longer than {self.timeout_s:g} s") from None
        except OSError as exc:
            raise BenchUnavailable(f"vllm bench serve could not start: {exc}") from None
        if res.returncode != 0:
            raise BenchUnavailable(f"vllm bench serve exited {res.returncode} without a result: "
                                   f"{tail(res.stderr or res.stdout)}")
        self.runs["own process"] += 1

    def close(self) -> None:
        if self.resident is not None:
            self.resident.close()
            self.resident = None
