"""The host-side worker: one python3 process per host per run, one JSON request per line.

The engine sends this file's source as the first line on the worker's stdin (through a fixed
bootstrap command, so nothing is ever interpolated into a shell), then JSON requests:

  {"id", "op": "hello", "runtime": KEY}            -> python, platform, missing runtime packages
  {"id", "op": "runtime", "key": KEY, "zip": B64}  -> unpack dflash_host (and psutil/tenacity) into the user's cache
  {"id", "op": "lock", "path", "wait_s", "record"} -> {"locked", "holder" | "stale" | "nested_in"}: the host lock
  {"id", "op": "run", "module", "args", "check", "diff", "timeout_s", "source"}  (source: the first time only)
  {"id", "op": "put", "path", "data": B64, "append"} -> {"written": N} or {"error"}: a file's bytes, in chunks
  {"id", "op": "exit"}                             -> releases the host lock, then exits
  {"id", "op": "release"}                          -> releases the host lock and forgets the run's modules;
                                                      {"kept": true}: it waits for the next run (a kept
                                                      connection, engine/connection/persist_daemon.py), else it exits
  {"id", "op": "ping"}                             -> {"pong": true}: still here (asked by the daemon only)

and reads one JSON line back per request, plus {"id", "progress": msg} lines for long tasks and {"id", "beat": true}
every `beat_s` (hello's, else BEAT_S) while a request is handled: the control node takes a host that sends nothing
for its silence limit as gone silent (engine/connection/transport.py), so a long quiet task must still be heard.

stdin is read by a thread of its own: its end while a request is handled means the controlling connection is gone
(the run died or gave the host up, its ssh session or the kept-connection daemon closed the channel); the worker
then stops the task's processes (stop_task) and exits at once, so the host lock goes with it.
A task module's helpers come from the dflash_host package of the runtime KEY (engine/connection/runtime.py),
never from the sources of a run request. Standard library only: the host needs nothing but python3 >= 3.9.
"""

import _thread  # _thread and _queue, the C modules alone: threading and queue cost the worker's start a few ms
import importlib.util
import json
import os
import sys
import time

try:
    from _queue import SimpleQueue
except ImportError:  # another python than CPython
    from queue import SimpleQueue

# Imported where used, not here: base64, io, zipfile (runtime install), ctypes (the subreaper), traceback (a
# module crash), hashlib and marshal (the code cache). The worker starts on every host in
# every run: its start-up is paid per host, on the host's CPU.

RUNTIME_PACKAGES = ("psutil", "tenacity")
HOST_PACKAGE = "dflash_host"  # the task modules' helpers, from the runtime folder of this control node's version
TASK_PREFIX = "dfp_task_"
BEAT_S = 5.0  # seconds between two beats while a request is handled, unless hello asks for another interval
TASK_MARK = "DFP_TASK"  # in the environment of every process a task starts: how its processes are found again


def load_task(name, source):
    """The task module NAME from the source the engine sent, as module dfp_task_NAME.

    Under its own name a task module such as `copy` or `stat` would shadow the standard library's.
    """
    fullname = TASK_PREFIX + name
    filename = "library/" + name + ".py"
    module = type(sys)(fullname)
    module.__file__ = filename
    sys.modules[fullname] = module
    try:
        exec(cached_code(source, filename), module.__dict__)  # noqa: S102 - the engine's own module source, sent by the control node
    except BaseException:
        sys.modules.pop(fullname, None)
        raise
    return module


def cached_code(source, filename):
    """The module's code object: compiled once per host and python version, then loaded with marshal."""
    import hashlib
    import marshal

    key = hashlib.sha256((sys.version + "\0" + filename + "\0" + source).encode("utf-8")).hexdigest()[:32]
    path = os.path.join(cache_base(), "dflash-provision", "code", key + ".bin")
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


def cache_base():
    """The user's cache folder; for a user whose home cannot hold one (become_user nobody: /nonexistent), a folder
    of its own in the temp folder, used only when it is a real folder of this user that no one else may enter
    (another user could otherwise put code there for this one to run)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    if os.path.isdir(base) or os.access(os.path.dirname(base.rstrip("/")) or "/", os.W_OK):
        return base
    import stat
    import tempfile

    private = os.path.join(tempfile.gettempdir(), f"dflash-provision-cache-{os.getuid()}")
    try:
        os.mkdir(private, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return base
    st = os.lstat(private)
    if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) & 0o077 == 0:
        return private
    return base


def runtime_dir(key):
    return os.path.join(cache_base(), "dflash-provision", "runtime", key)


def missing_packages():
    """What the task modules need and this host lacks: psutil or tenacity (found, not imported: importing
    tenacity costs ~50 ms; a copy of the host's own serves), and dflash_host of the runtime's version."""
    missing = [name for name in RUNTIME_PACKAGES if importlib.util.find_spec(name) is None]
    if HOST_PACKAGE not in sys.modules:
        missing.append(HOST_PACKAGE)
    return missing


def use_runtime(key):
    """Put the runtime KEY on sys.path (after the host's own packages) and load its dflash_host."""
    path = runtime_dir(key) if key else ""
    if path and os.path.isdir(path):
        if path not in sys.path:
            sys.path.append(path)
        load_host_package(path)
    importlib.invalidate_caches()


def load_host_package(path):
    """dflash_host from the runtime folder `path`, whatever else sys.path holds (a checkout in the working
    folder, another version): the key names the version, so it is the control node's."""
    init = os.path.join(path, HOST_PACKAGE, "__init__.py")
    if not os.path.isfile(init):
        return
    for name in [n for n in sys.modules if n == HOST_PACKAGE or n.startswith(HOST_PACKAGE + ".")]:
        del sys.modules[name]
    spec = importlib.util.spec_from_file_location(HOST_PACKAGE, init, submodule_search_locations=[os.path.dirname(init)])
    package = importlib.util.module_from_spec(spec)
    sys.modules[HOST_PACKAGE] = package
    spec.loader.exec_module(package)


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


class task_environment:  # noqa: N801 - used as a `with` statement, like contextlib's
    """The task keyword `environment`: these variables in os.environ while the module runs (so in every process
    it starts), the worker's own environment restored after. One task at a time runs in a worker."""

    def __init__(self, env):
        self.env = {str(k): str(v) for k, v in (env or {}).items()}
        self.saved = {}

    def __enter__(self):
        self.saved = {k: os.environ.get(k) for k in self.env}
        os.environ.update(self.env)

    def __exit__(self, *exc):
        for name, value in self.saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


class TaskTimeout(BaseException):
    """Raised in a module when its task's `timeout` runs out (BaseException: modules' `except Exception` pass it on).
    `running`: the worker's descendants at that moment, before the module's own clean-up (the command module stops
    its process group, whose shell may reap a child first) can make what the task had started look smaller."""

    def __init__(self, running):
        super().__init__()
        self.running = running


def run_with_timeout(timeout_s, fn, *args):
    """fn(*args) under a wall-clock limit (the task keyword `timeout`), like Ansible's; None = no limit."""
    if not timeout_s:
        return fn(*args)
    import signal

    def expired(signum, frame):
        raise TaskTimeout(descendants(os.getpid()))

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, float(timeout_s))
    try:
        return fn(*args)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


PR_SET_CHILD_SUBREAPER = 36


def become_subreaper():
    """Orphaned descendants of a task (a `setsid x &` whose parent exited) are re-parented to this worker, not to
    init, so that a task that runs past its timeout can still find and stop everything it started (Linux). Done
    before the first task with a timeout (ctypes costs the worker's start ~2 ms that most runs never need)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):  # another kernel or libc: the process group still covers most cases
        pass
    return True


def host_platform():
    """sysconfig.get_platform() on Linux ("linux-x86_64"), without importing sysconfig and platform."""
    uname = os.uname()
    return f"{uname.sysname.lower()}-{uname.machine}" if sys.platform.startswith("linux") else sys.platform


def libc_version():
    """"glibc-2.36" as "-".join(platform.libc_ver()) gives it, from confstr (no scan of the executable)."""
    try:
        return "-".join(os.confstr("CS_GNU_LIBC_VERSION").split(None, 1))
    except (AttributeError, ValueError, OSError):
        return ""


def descendants(root):
    """{pid: start time} of every process below `root`, read from /proc (each start time tells a reused pid)."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        children.setdefault(int(fields[1]), []).append((int(entry), int(fields[19])))
    found, stack = {}, [root]
    while stack:
        for pid, start in children.get(stack.pop(), ()):
            found[pid] = start
            stack.append(pid)
    return found


def stop_new_descendants(before, at_expiry):
    """Kill what a timed-out task started (every descendant that was not there before it), then reap them; the
    pids it had running when its time ran out (`at_expiry`) or still has now, whoever stopped them."""
    import signal

    new = {pid: start for pid, start in descendants(os.getpid()).items() if before.get(pid) != start}
    for pid in new:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    for pid in new:
        try:
            os.waitpid(pid, 0)  # re-parented to this subreaper: its status is ours to collect
        except OSError:  # not our child (a grandchild its own parent reaps)
            pass
    return sorted(set(new) | {pid for pid, start in at_expiry.items() if before.get(pid) != start})


def boot_ticks():
    """Now, in the clock ticks since boot in which /proc/PID/stat gives a process's start (0 without /proc)."""
    try:
        with open("/proc/uptime", "rb") as fh:
            return int(float(fh.read().split()[0]) * os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return 0


def marked(mark):
    """The pids whose environment holds TASK_MARK=mark: what a task started, wherever it was re-parented since (a
    shell's `cmd &` whose shell ended). Processes of other users are skipped unless the worker is root."""
    needle = ("\0" + TASK_MARK + "=" + mark + "\0").encode()
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open("/proc/" + entry + "/environ", "rb") as fh:
                    if needle in b"\0" + fh.read() + b"\0":
                        found.add(int(entry))
            except OSError:
                pass
    return found


def detached(pid, session):
    """Whether a process is a daemon its task meant to outlive it (the vLLM server): in another session than the
    worker's, with nothing of the task's on its stdin, stdout and stderr (no pipe, socket or terminal; /dev/null or
    files). What still writes into the task's output is the task's."""
    try:
        if os.getsid(pid) == session:
            return False
        for fd in (0, 1, 2):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except FileNotFoundError:
                continue  # closed
            if target.startswith(("pipe:", "socket:", "/dev/pts/", "/dev/tty")):
                return False
        return True
    except OSError:
        return False


def stop_task(mark, since):
    """SIGKILL what the running task started, its run being gone: every process carrying its mark and every
    descendant of the worker started since the task began (`since`, boot ticks), but a daemon it left (detached).
    Three passes, for what forked while the first one killed."""
    import signal

    me, session = os.getpid(), os.getsid(0)
    for _ in range(3):
        found = {pid for pid, start in descendants(me).items() if start >= since} | marked(mark)
        doomed = [pid for pid in found if pid != me and not detached(pid, session)]
        if not doomed:
            return
        for pid in doomed:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def _parent_and_uid(pid):
    """(parent PID, real uid) of a process from /proc, or (None, None) when it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            ppid = int(fh.read().rsplit(b")", 1)[1].split()[1])
        with open(f"/proc/{pid}/status", "rb") as fh:
            uid = next(int(line.split()[1]) for line in fh if line.startswith(b"Uid:"))
    except (OSError, ValueError, IndexError, StopIteration):
        return None, None
    return ppid, uid


def _has_open(pid, st):
    """Whether process `pid` has the file `st` (an os.stat result) open, by /proc/<pid>/fd."""
    folder = f"/proc/{pid}/fd"
    try:
        names = os.listdir(folder)
    except OSError:
        return False
    for name in names:
        try:
            there = os.stat(os.path.join(folder, name))
        except OSError:
            continue
        if (there.st_dev, there.st_ino) == (st.st_dev, st.st_ino):
            return True
    return False


def started_by_holder(fd):
    """Whether an ancestor of this worker, every process between them of this user, has the lock file open:
    a worker of the run holding the lock (the holder itself, or one of its run sharing it) whose task started
    this run (ansible-playbook in a command task, same host, same user). A worker keeps the file open only
    while it holds or shares the lock, and takes the lock before any task runs, so no waiting worker is an
    ancestor of a task. Such a run is let in: waiting would deadlock on its own parent."""
    st = os.fstat(fd)
    pid, uid = os.getpid(), os.getuid()
    for _ in range(256):
        ppid, owner = _parent_and_uid(pid)
        if ppid is None or owner != uid or ppid <= 1 or _parent_and_uid(ppid)[1] != uid:
            return False
        if _has_open(ppid, st):
            return True
        pid = _resident_client(ppid)
    return False


def _resident_client(pid):
    """The process to go on from after `pid`: for a run of the resident control node (`pid` is this worker's
    control node, a fork of the resident server), the client it runs for, whose ancestors are the run's own;
    else `pid`. DFP_RESIDENT_RUN ("CHILD:CLIENT", set by dfp_cli/ansible_playbook/child.py from the client's
    SO_PEERCRED) counts only where CHILD is this worker's parent: a task's nested run in its own process inherits
    the variable, with another parent."""
    child, _, client = os.environ.get("DFP_RESIDENT_RUN", "").partition(":")
    if child.isdigit() and client.isdigit() and int(child) == pid == os.getppid():
        return int(client)
    return pid


class HostLock:
    """flock on a file under the tool's root, held for the worker's whole life (one run per host at a time).

    The file holds a JSON record of the run that holds it. The kernel drops the flock when the holder
    dies, but the record stays: finding one when the lock is free means a run died holding it.
    """

    def __init__(self):
        self.fd = None
        self.shared = None  # the file, open while this worker shares another worker's hold (started_by_holder)

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
        # Never through a symlink: the lock file is the tool's own, at a fixed name.
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0), 0o600)
        try:
            self._give_to_login_user(fd)
        except OSError:
            os.close(fd)
            raise
        deadline = time.monotonic() + max(0.0, float(wait_s))
        # An empty record is a holder between its flock and its write (most often a worker of this very run, then
        # found by run_id): neither said nor given up on until it has stayed empty a second.
        quiet_until, told = time.monotonic() + 1.0, False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                holder = self._read(fd)
                if isinstance(holder, dict) and record.get("run_id") and holder.get("run_id") == record.get("run_id"):
                    self.shared = fd  # this run holds it already: another inventory name of the same machine
                    return {"locked": True, "shared_with": holder.get("worker_pid"), "path": path}
                if started_by_holder(fd):
                    self.shared = fd  # a run started by a task of the holder's run: it runs inside that run's hold
                    return {"locked": True, "nested_in": holder.get("worker_pid") if isinstance(holder, dict) else None,
                            "path": path}
                if time.monotonic() >= deadline and (holder or time.monotonic() >= quiet_until):
                    os.close(fd)
                    return {"locked": False, "holder": holder}
                if not told and (holder or time.monotonic() >= quiet_until):
                    progress(f"waiting for the host lock held by {json.dumps(holder)}")
                    told = True
                time.sleep(0.1)
        stale = self._read(fd)
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(dict(record, worker_pid=os.getpid())).encode("utf-8"), 0)
        os.fsync(fd)
        self.fd = fd
        return {"locked": True, "stale": stale, "path": path}

    @staticmethod
    def _give_to_login_user(fd):
        """A lock file made by root through sudo (become) belongs to the user sudo was run by, so that a later
        run of that user without become can open it too (root can open any). Only a regular file with one link:
        a hard link planted at the lock's name must not hand another file to that user."""
        import stat

        uid, gid = os.environ.get("SUDO_UID"), os.environ.get("SUDO_GID")
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
            raise OSError(0, "not a regular file of its own (a link or a special file is at the lock's name)")
        if os.geteuid() != 0 or not (uid and uid.isdigit() and gid and gid.isdigit()):
            return
        if st.st_uid == 0:
            os.fchown(fd, int(uid), int(gid))

    def release(self):
        if self.shared is not None:
            os.close(self.shared)
            self.shared = None
        if self.fd is not None:
            os.ftruncate(self.fd, 0)  # a clean end leaves no record; a dead run's record is what "stale" means
            os.close(self.fd)
            self.fd = None


class Worker:
    """The protocol loop: one JSON request per line in, one JSON answer per request out (plus progress lines)."""

    def __init__(self, out):
        self.out = out
        self.sources = {}
        self.loaded = {}
        self.subreaper = False
        self.lock = HostLock()
        self.busy = None  # the request being handled: beats carry its id
        self.ended = False  # stdin ended: no request is started any more
        self.beat_s = BEAT_S
        self.nudge = _thread.allocate_lock()  # released when hello changes beat_s: the beat's wait starts anew
        self.nudge.acquire()
        self.task = None  # (mark, boot ticks at its start) of the module call running now
        self.tasks = 0
        self.writing = _thread.allocate_lock()  # the protocol loop and the beat thread write lines

    def send(self, obj, answer=False):
        """One line to the control node; after an `answer` no beat carries the request's id."""
        line = json.dumps(obj, default=str) + "\n"
        with self.writing:
            if answer:
                self.busy = None
            self.out.write(line)
            self.out.flush()

    def beat(self):
        """A beat line every beat_s while a request is handled (a thread): a long quiet task is still heard, so the
        control node can take a host that sends nothing at all as silent. A failed write is left to the reader."""
        while True:
            if self.nudge.acquire(timeout=self.beat_s):
                continue  # nudged (and held again): wait anew with the new interval
            with self.writing:
                if self.busy is not None:
                    try:
                        self.out.write(json.dumps({"id": self.busy.get("id"), "beat": True}) + "\n")
                        self.out.flush()
                    except (OSError, ValueError):
                        pass

    def read(self, fd, head, lines):
        """stdin's lines into `lines` (a thread), `head` first; at its end the controlling connection is gone
        (gone()). Read from the descriptor: a thread blocked in sys.stdin's buffered read would make the
        interpreter's exit abort (its buffer's lock is held)."""
        buf, chunk = bytearray(), head
        while True:
            buf += chunk
            end = buf.find(b"\n", len(buf) - len(chunk))  # a long line is searched once, chunk by chunk
            while end >= 0:
                lines.put(bytes(buf[:end + 1]))
                del buf[:end + 1]
                end = buf.find(b"\n")
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:  # a process that shares stdin made it non-blocking: not its end
                chunk = b""
                time.sleep(0.05)
                continue
            except OSError:
                break
            if not chunk:
                break
        self.gone()
        lines.put(None)

    def gone(self):
        """The controlling connection ended. Idle: the loop ends after the lines already read. While a request is
        handled nobody will read its answer and the next run must not wait for it: the task's processes are stopped
        and the worker exits at once; the kernel drops the host lock (its record stays: the next run says it took
        over the lock of a run that died)."""
        self.ended = True
        if self.busy is None:
            return
        if self.task is not None:
            stop_task(*self.task)
        os._exit(1)

    def progress(self, rid):
        return lambda msg: self.send({"id": rid, "progress": str(msg)})

    def op_hello(self, req):
        use_runtime(req.get("runtime", ""))
        self.beat_s = max(0.2, float(req.get("beat_s") or BEAT_S))
        try:
            self.nudge.release()
        except RuntimeError:  # released already, not yet taken back by the beat thread
            pass
        return {
            "python": "{}.{}.{}".format(*sys.version_info[:3]),
            "executable": sys.executable,
            "platform": host_platform(),
            "machine": os.uname().machine,
            "libc": libc_version(),
            "missing": missing_packages(),
            "pid": os.getpid(),
            "home": os.path.expanduser("~"),
        }

    def op_runtime(self, req):
        return {"missing": install_runtime(req["key"], req["zip"])}

    def _module(self, req):
        name = req["module"]
        if req.get("source") is not None:
            self.sources[name] = req["source"]
            self.loaded.pop(name, None)
        if name not in self.loaded:
            self.loaded[name] = load_task(name, self.sources[name])
        return self.loaded[name]

    def op_run(self, req):
        mod = self._module(req)
        contract = importlib.import_module(HOST_PACKAGE + ".module")
        ctx = contract.Context(check=bool(req.get("check")), diff=bool(req.get("diff")), progress=self.progress(req.get("id")))
        started = time.monotonic()
        if req.get("timeout_s") and not self.subreaper:
            self.subreaper = become_subreaper()  # what a timed task starts stays below this worker, to be stopped
        before = descendants(os.getpid()) if req.get("timeout_s") else None
        try:
            args = req.get("args") or {}
            with task_environment(self._marked(req.get("environment"))):
                result = run_with_timeout(req.get("timeout_s"), contract.execute, mod.ARGS, mod.run, args, ctx,
                                          req["module"])
        except TaskTimeout as timeout:
            stopped = stop_new_descendants(before or {}, timeout.running)
            result = {"failed": True, "changed": False, "timed_out": True, "stopped_pids": stopped,
                      "msg": "the task ran past its timeout of {} s (task keyword `timeout`) and was stopped with the {} "
                             "processes it had started; what it had done so far stays".format(req.get("timeout_s"),
                                                                                              len(stopped))}
        finally:
            self.task = None
        result["_duration_s"] = round(time.monotonic() - started, 6)
        return {"result": result}

    def _marked(self, environment):
        """The task's environment with its mark (TASK_MARK), which everything it starts inherits: the task's
        processes can be found (stop_task) if its run is gone while it runs."""
        self.tasks += 1
        self.task = (f"{os.getpid()}.{self.tasks}", boot_ticks())
        return dict(environment or {}, **{TASK_MARK: self.task[0]})

    def op_lock(self, req):
        try:
            return self.lock.take(req["path"], req.get("wait_s", 0), req.get("record") or {}, self.progress(req.get("id")))
        except OSError as exc:  # not a lock held by another run: the file itself cannot be the lock
            return {"locked": False, "path": req["path"], "unusable": "{}: {}".format(
                req["path"], getattr(exc, "strerror", None) or exc)}

    def op_put(self, req):
        """Write a chunk of a file the engine uploads (to a worker started through sudo, which SFTP cannot reach
        as its user): the first chunk creates or truncates the file (mode 0600), the next ones append."""
        import base64

        path = os.path.expanduser(req["path"])
        # The first chunk makes a new file (an old one at that name is removed first, never written through: it
        # may be a link planted in a folder others can write); the next ones append to it, never through a link.
        flags = os.O_WRONLY | getattr(os, "O_NOFOLLOW", 0) | (os.O_APPEND if req.get("append") else os.O_CREAT | os.O_EXCL)
        try:
            data = base64.b64decode(req.get("data") or "")
            if not req.get("append") and os.path.lexists(path) and not os.path.isdir(path):
                os.unlink(path)
            fd = os.open(path, flags | getattr(os, "O_CLOEXEC", 0), 0o600)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
            finally:
                os.close(fd)
        except (OSError, ValueError) as exc:
            return {"error": "{}: {}".format(path, getattr(exc, "strerror", None) or exc)}
        return {"written": len(data)}

    def op_exit(self, req):
        self.lock.release()
        return {"bye": True}

    def op_release(self, req):
        """The end of a run on a worker that may serve the next one: nothing of this run stays but the imports
        of the runtime. One that became a subreaper (a timed task) exits instead: a kept worker must not
        collect the orphans of what its tasks started."""
        self.lock.release()
        self.sources.clear()
        self.loaded.clear()
        for name in [n for n in sys.modules if n.startswith(TASK_PREFIX)]:
            del sys.modules[name]
        os.chdir(os.path.expanduser("~"))
        return {"kept": not self.subreaper}

    def op_ping(self, req):
        return {"pong": True}

    def handle(self, req):
        """Answer one request; a module bug is reported with its traceback and the worker keeps serving."""
        rid = req.get("id")
        handler = getattr(self, "op_" + str(req.get("op")), None)
        if handler is None:
            return {"id": rid, "error": "unknown op {!r}".format(req.get("op"))}
        try:
            return dict(handler(req), id=rid)
        except Exception as exc:
            import traceback

            return {"id": rid, "result": {
                "failed": True, "changed": False, "exception": traceback.format_exc(),
                "msg": "module {} crashed: {}: {}".format(req.get("module"), type(exc).__name__, exc),
            }}

    def serve(self, lines):
        """The requests read from stdin (`lines`, None at its end), each answered before the next one is taken."""
        for line in iter(lines.get, None):
            if line.strip():
                req = json.loads(line)
                self.busy = req
                if self.ended:  # after busy is set: either this loop or gone() sees the other's flag
                    return
                reply = self.handle(req)
                self.send(reply, answer=True)
                if req.get("op") == "exit" or (req.get("op") == "release" and not reply.get("kept")):
                    return


def buffered(stream):
    """What the bootstrap's readline left in the stream's buffer (the next requests may have come with the
    source), taken without waiting; stdin is read from its descriptor from then on (Worker.read)."""
    fd = stream.fileno()
    os.set_blocking(fd, False)
    try:
        return stream.read1(1 << 20) or b""
    except (BlockingIOError, OSError):
        return b""
    finally:
        os.set_blocking(fd, True)


def main():
    out = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    # Anything a module or its children print goes to stderr, never into the protocol stream.
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    worker, lines = Worker(out), SimpleQueue()
    _thread.start_new_thread(worker.read, (0, buffered(sys.stdin.buffer), lines))
    _thread.start_new_thread(worker.beat, ())
    worker.serve(lines)
    # The connection ended between requests (or after exit): a normal end, which leaves no lock record behind.
    # Only gone() during a request ends the worker without this, and that record says a run died in a task.
    worker.lock.release()


main()
