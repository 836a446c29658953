"""The host-side worker: one python3 process per host per run, one JSON request per line.

The engine sends this file's source as the first line on the worker's stdin (through a fixed
bootstrap command, so nothing is ever interpolated into a shell), then JSON requests:

  {"id", "op": "hello", "runtime": KEY}            -> python, platform, missing runtime packages
  {"id", "op": "runtime", "key": KEY, "zip": B64}  -> unpack psutil/tenacity into the user's cache
  {"id", "op": "lock", "path", "wait_s", "record"} -> {"locked", "holder" | "stale"}: the host lock
  {"id", "op": "run", "module", "args", "check", "diff", "timeout_s", "sources": {name: source}}
  {"id", "op": "exit"}                             -> releases the host lock, then exits

and reads one JSON line back per request (plus {"id", "progress": msg} lines for long tasks).
Standard library only: the host needs nothing but python3 >= 3.9.
"""

import importlib.util
import json
import os
import sys
import time

# Imported where used, not here: base64, io, zipfile (runtime install), platform and sysconfig (hello),
# traceback (a module crash), hashlib and marshal (the code cache). The worker starts on every host in
# every run: its start-up is paid per host, on the host's CPU.

RUNTIME_PACKAGES = ("psutil", "tenacity")
STDLIB = set(getattr(sys, "stdlib_module_names", ())) | {"stat", "copy", "uuid", "platform", "shutil", "json"}


class SourceFinder:  # the finder and loader protocols; importlib.abc costs ~12 ms to import
    """Imports library modules from sources the engine sent, so modules can import each other."""

    def __init__(self):
        self.sources = {}

    TASK_PREFIX = "dfp_task_"

    def _source_name(self, fullname):
        """Task modules load under dfp_task_NAME so `stat` or `copy` never shadow the standard library."""
        if fullname.startswith(self.TASK_PREFIX):
            name = fullname[len(self.TASK_PREFIX) :]
            return name if name in self.sources else None
        if fullname in self.sources and fullname not in STDLIB:
            return fullname
        return None

    def find_spec(self, fullname, path=None, target=None):
        name = self._source_name(fullname)
        if name is not None:
            return importlib.util.spec_from_loader(fullname, self, origin="library/" + name + ".py")
        return None

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        name = self._source_name(module.__name__)
        code = cached_code(self.sources[name], "library/" + name + ".py")
        module.__file__ = "library/" + name + ".py"
        exec(code, module.__dict__)  # noqa: S102 - the engine's own module source, sent by the control node


def cached_code(source, filename):
    """The module's code object: compiled once per host and python version, then loaded with marshal."""
    import hashlib
    import marshal

    key = hashlib.sha256((sys.version + "\0" + filename + "\0" + source).encode("utf-8")).hexdigest()[:32]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    path = os.path.join(base, "dflash-provision", "code", key + ".bin")
    try:
        with open(path, "rb") as fh:
            return marshal.loads(fh.read())  # noqa: S302 - our cache in the user's own 0700-able folder, keyed by sha256 of the source
    except (OSError, ValueError, EOFError, TypeError):
        pass
    code = compile(source, filename, "exec")
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.tmp-{os.getpid()}"
        with open(tmp, "wb") as fh:
            fh.write(marshal.dumps(code))
        os.rename(tmp, path)
    except OSError:
        pass
    return code


def runtime_dir(key):
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "dflash-provision", "runtime", key)


def missing_packages():
    """Which runtime packages cannot be found (found, not imported: importing tenacity costs ~50 ms)."""
    return [name for name in RUNTIME_PACKAGES if importlib.util.find_spec(name) is None]


def use_runtime(key):
    path = runtime_dir(key)
    if os.path.isdir(path) and path not in sys.path:
        sys.path.append(path)
    importlib.invalidate_caches()


def install_runtime(key, blob):
    """Unpack the runtime zip into a temp folder and rename it into place (atomic, concurrent-safe)."""
    import base64
    import io
    import zipfile

    final = runtime_dir(key)
    if not os.path.isdir(final):
        parent = os.path.dirname(final)
        os.makedirs(parent, exist_ok=True)
        tmp = f"{final}.tmp-{os.getpid()}"
        with zipfile.ZipFile(io.BytesIO(base64.b64decode(blob))) as zf:
            zf.extractall(tmp)
        try:
            os.rename(tmp, final)
        except OSError:  # another run won the race
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
    use_runtime(key)
    return missing_packages()


class TaskTimeout(BaseException):
    """Raised in a module when its task's `timeout` runs out (BaseException: modules' `except Exception` pass it on)."""


def run_with_timeout(timeout_s, fn, *args):
    """fn(*args) under a wall-clock limit (the task keyword `timeout`), like Ansible's; None = no limit."""
    if not timeout_s:
        return fn(*args)
    import signal

    def expired(signum, frame):
        raise TaskTimeout()

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, float(timeout_s))
    try:
        return fn(*args)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


class HostLock:
    """flock on a file under the tool's root, held for the worker's whole life (one run per host at a time).

    The file holds a JSON record of the run that holds it. The kernel drops the flock when the holder
    dies, but the record stays: finding one when the lock is free means a run died holding it.
    """

    def __init__(self):
        self.fd = None

    @staticmethod
    def _read(fd):
        try:
            os.lseek(fd, 0, 0)
            data = os.read(fd, 65536)
            return json.loads(data.decode("utf-8")) if data.strip() else None
        except (OSError, ValueError):
            return {"unreadable": True}

    def take(self, path, wait_s, record, progress):
        import fcntl

        path = os.path.expanduser(path)
        os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
        deadline = time.monotonic() + max(0.0, float(wait_s))
        told = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                holder = self._read(fd)
                if isinstance(holder, dict) and record.get("run_id") and holder.get("run_id") == record.get("run_id"):
                    os.close(fd)  # this run holds it already: another inventory name of the same machine
                    return {"locked": True, "shared_with": holder.get("worker_pid"), "path": path}
                if time.monotonic() >= deadline:
                    os.close(fd)
                    return {"locked": False, "holder": holder}
                if not told:
                    progress(f"waiting for the host lock held by {json.dumps(holder)}")
                    told = True
                time.sleep(0.1)
        stale = self._read(fd)
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(dict(record, worker_pid=os.getpid())).encode("utf-8"), 0)
        os.fsync(fd)
        self.fd = fd
        return {"locked": True, "stale": stale, "path": path}

    def release(self):
        if self.fd is not None:
            os.ftruncate(self.fd, 0)  # a clean end leaves no record; a dead run's record is what "stale" means
            os.close(self.fd)
            self.fd = None


def main():
    out = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    # Anything a module or its children print goes to stderr, never into the protocol stream.
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    finder = SourceFinder()
    sys.meta_path.insert(0, finder)
    loaded = {}
    lock = HostLock()

    def send(obj):
        out.write(json.dumps(obj, default=str) + "\n")
        out.flush()

    for line in sys.stdin.buffer:
        if not line.strip():
            continue
        req = json.loads(line)
        rid = req.get("id")
        op = req.get("op")
        try:
            if op == "hello":
                import platform
                import sysconfig

                use_runtime(req.get("runtime", ""))
                send(
                    {
                        "id": rid,
                        "python": platform.python_version(),
                        "executable": sys.executable,
                        "platform": sysconfig.get_platform(),
                        "machine": platform.machine(),
                        "libc": "-".join(platform.libc_ver()),
                        "missing": missing_packages(),
                        "pid": os.getpid(),
                    }
                )
            elif op == "runtime":
                send({"id": rid, "missing": install_runtime(req["key"], req["zip"])})
            elif op == "run":
                for name, source in (req.get("sources") or {}).items():
                    finder.sources[name] = source
                    sys.modules.pop(name, None)
                    sys.modules.pop(finder.TASK_PREFIX + name, None)
                    loaded.pop(name, None)
                name = req["module"]
                mod = loaded.get(name)
                if mod is None:
                    mod = loaded[name] = importlib.import_module(finder.TASK_PREFIX + name)
                common = sys.modules["_common"]
                ctx = common.Context(
                    check=bool(req.get("check")),
                    diff=bool(req.get("diff")),
                    progress=lambda msg, _rid=rid: send({"id": _rid, "progress": str(msg)}),
                )
                started = time.monotonic()
                try:
                    args = req.get("args") or {}
                    result = run_with_timeout(req.get("timeout_s"), common.execute, mod.ARGS, mod.run, args, ctx, name)
                except TaskTimeout:
                    result = {"failed": True, "changed": False, "timed_out": True,
                              "msg": "the task ran past its timeout of {} s (task keyword `timeout`) and was stopped; "
                                     "what it had done so far stays".format(req.get("timeout_s"))}
                result["_duration_s"] = round(time.monotonic() - started, 6)
                send({"id": rid, "result": result})
            elif op == "lock":
                progress = lambda msg, _rid=rid: send({"id": _rid, "progress": str(msg)})  # noqa: E731
                send(dict(lock.take(req["path"], req.get("wait_s", 0), req.get("record") or {}, progress), id=rid))
            elif op == "exit":
                lock.release()
                send({"id": rid, "bye": True})
                return
            else:
                send({"id": rid, "error": f"unknown op {op!r}"})
        except Exception as exc:  # a module bug: report it with the traceback, keep serving
            import traceback

            send(
                {
                    "id": rid,
                    "result": {
                        "failed": True,
                        "changed": False,
                        "msg": "module {} crashed: {}: {}".format(req.get("module"), type(exc).__name__, exc),
                        "exception": traceback.format_exc(),
                    },
                }
            )


main()
