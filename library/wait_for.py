"""Wait until a TCP port is open (or closed, or drained), a path exists (or is gone), or a file shows a regex.

No role or playbook uses it (vllm_server waits for the server itself) and the benchmark does not either:
it is a general module for user playbooks (tests/engine/run/test_general_modules_play.py runs it).

Takes ansible.builtin.wait_for's options and returns its fields: `state`, `port`, `path`, `search_regex`,
`match_groups` and `match_groupdict` (a regex's groups, in a file), `elapsed` (whole seconds), and for a path
that exists what Ansible adds to every result naming one (uid, gid, owner, group, mode, size, and state as file,
directory, link or hard: Ansible's AnsibleModule overwrites the state given with it); it fails with
Ansible's messages ("Timeout when waiting for 127.0.0.1:8000", "... for file P", "... for search string R in
P", "... to stop.", "... to be absent.", "... to drain"; `msg` replaces them), ours adding what it last saw.
state started / present (one meaning): the port accepts a connection (with search_regex: and sends text
matching it), the path exists (following a link; with search_regex: its text matches); stopped / absent: the
port refuses, the path is gone; drained: no connection to host:port is left in active_connection_states
(Linux, /proc/net/tcp; exclude_hosts are not counted). Neither port nor path: sleep for timeout, as Ansible's.
timeout counts from the start, delay included (as Ansible's); connect_timeout bounds each connection attempt.

Ours beside Ansible's: `from_offset` (search_regex only in bytes from there on), the fields `elapsed_s`
(float), and for search_regex in a file `match` (the matched text), `groups`, `match_end_offset` (byte offset
just after the match, a good from_offset for the next wait); the old names timeout_s, delay_s and sleep_s are
aliases. Where ours differs on purpose: sleep defaults to 0.1 s (Ansible's 1 s: ours returns sooner); in check
mode ours looks once and does not wait (Ansible skips the task); a regex on a folder or an unreadable file
fails at once (Ansible waits out the timeout); search_regex with state stopped, absent or drained is refused
(Ansible ignores it). Read-only: never changed. A file that shrinks below the read position (rotated or
truncated) is read again from its start.
"""

from __future__ import annotations

import binascii
import errno
import os
import re
import select
import socket
import time

from dflash_host.host.fileattrs import path_info
from dflash_host.module import Context, ModuleError, main

ARGS = {
    "port": {"type": "int", "default": None, "help": "TCP port to watch (with host)"},
    "host": {"type": "str", "default": "127.0.0.1", "help": "address of the port"},
    "path": {"type": "path", "default": None, "help": "file or folder to watch"},
    "search_regex": {
        "type": "str",
        "default": None,
        "help": "with path: wait until the file's text matches this; with port: until the port sends text that "
        "does (Python regex, MULTILINE)",
    },
    "from_offset": {
        "type": "int",
        "default": 0,
        "help": "with path and search_regex: only look at bytes from this offset (e.g. the log's size before a start)",
    },
    "state": {
        "type": "str",
        "default": "started",
        "choices": ["started", "present", "stopped", "absent", "drained"],
        "help": "started or present: the port is open, the path exists (or matches search_regex); stopped or "
        "absent: the port is closed, the path is gone; drained: no active connection to host:port is left",
    },
    "timeout": {"type": "float", "default": 300.0, "help": "give up (fail) after this many seconds from the start"},
    "timeout_s": {"type": "float", "default": None, "alias_of": "timeout", "help": "alias of timeout"},
    "delay": {"type": "float", "default": 0.0, "help": "wait this long before the first look"},
    "delay_s": {"type": "float", "default": None, "alias_of": "delay", "help": "alias of delay"},
    "sleep": {"type": "float", "default": 0.1, "help": "pause between looks (Ansible's default: 1)"},
    "sleep_s": {"type": "float", "default": None, "alias_of": "sleep", "help": "alias of sleep"},
    "connect_timeout": {"type": "float", "default": 5.0, "help": "seconds one connection attempt may take"},
    "msg": {"type": "str", "default": None, "help": "the failure message on a timeout, instead of the usual one"},
    "exclude_hosts": {
        "type": "list",
        "default": None,
        "help": "with state drained: connections from these hosts (names or addresses) do not count",
    },
    "active_connection_states": {
        "type": "list",
        "default": ["ESTABLISHED", "FIN_WAIT1", "FIN_WAIT2", "SYN_RECV", "SYN_SENT", "TIME_WAIT"],
        "help": "with state drained: the TCP states that count as a connection",
    },
}
# The arguments that decide what runs or which file, folder or address is touched: never built from what a
# host returned when the task runs on the control node (engine/run/trust.py).
CODE_ARGS = ("path", "host")

CARRY_BYTES = 64 * 1024  # already-read bytes kept so a match that straddles two reads is still found
SOCKET_READ_LIMIT = 1024 * 1024  # bytes read from a port for search_regex before the attempt is given up
PROGRESS_EVERY_S = 5.0
STATE_IDS = {"ESTABLISHED": "01", "SYN_SENT": "02", "SYN_RECV": "03", "FIN_WAIT1": "04", "FIN_WAIT2": "05",
             "TIME_WAIT": "06"}  # Ansible's get_connection_state_id: the hex states of /proc/net/tcp
PROC_TCP = {socket.AF_INET: "/proc/net/tcp", socket.AF_INET6: "/proc/net/tcp6"}
MATCH_ALL = {socket.AF_INET: "00000000", socket.AF_INET6: "0" * 32}
MAPPED_PREFIX, MAPPED_ALL = "0000000000000000FFFF0000", "0000000000000000FFFF000000000000"


def plan(args: dict) -> str:
    """Validate the combination of arguments (Ansible's refusals in Ansible's words); return the kind: port,
    path, regex (a file's text), banner (a port's text), drained or sleep."""
    port, path, regex, state = args["port"], args["path"], args["search_regex"], args["state"]
    for name in ("timeout", "delay", "sleep", "connect_timeout"):
        if args[name] < 0:
            raise ModuleError(f"module 'wait_for': {name} is {args[name]}; it must be 0 or more seconds")
    if args["from_offset"] < 0:
        raise ModuleError(f"module 'wait_for': from_offset is {args['from_offset']}; it must be 0 or more bytes")
    if port is not None and path is not None:
        raise ModuleError("port and path parameter can not both be passed to wait_for (module 'wait_for': give one)",
                          elapsed=0)
    if path is not None and state in ("stopped", "drained"):
        raise ModuleError(f"state={state} should only be used for checking a port in the wait_for module "
                          f"(with path: present or absent)", elapsed=0)
    if args["exclude_hosts"] is not None and state != "drained":
        raise ModuleError("exclude_hosts should only be with state=drained", elapsed=0)
    for name in args["active_connection_states"]:
        if name not in STATE_IDS:
            raise ModuleError(f"unknown active_connection_state ({name}) defined; known: {', '.join(STATE_IDS)}",
                              elapsed=0)
    if regex is not None:
        try:
            re.compile(regex)
        except re.error as exc:
            raise ModuleError(f"Invalid regular expression: {exc}")
        if state not in ("started", "present"):
            raise ModuleError(f"module 'wait_for': search_regex waits for text to appear; with state {state} it "
                              f"would be ignored (Ansible ignores it): leave it out or use state started")
    if from_offset_misused(args):
        raise ModuleError("module 'wait_for': from_offset needs path and search_regex (a file to read)")
    if port is not None and not 0 < port < 65536:
        raise ModuleError(f"module 'wait_for': port {port} is out of range 1-65535")
    if state == "drained":
        if port is None:
            raise ModuleError("module 'wait_for': state=drained needs port (the connections to host:port)")
        if not os.path.isfile(PROC_TCP[socket.AF_INET]):
            raise ModuleError("module 'wait_for': state=drained reads /proc/net/tcp, which this host lacks (Linux only)")
        return "drained"
    if port is not None:
        return "banner" if regex is not None and state in ("started", "present") else "port"
    if path is not None:
        return "regex" if regex is not None else "path"
    return "sleep"


def from_offset_misused(args: dict) -> bool:
    return bool(args["from_offset"]) and (args["path"] is None or args["search_regex"] is None)


def waiting_for(kind: str, args: dict) -> bool:
    """True when the state waits for the thing to be there (started/present), False for it to be gone."""
    return args["state"] in ("started", "present") or kind == "drained"


def timeout_message(kind: str, args: dict) -> str:
    """Ansible's words for a timeout."""
    host, port, path, regex = args["host"], args["port"], args["path"], args["search_regex"]
    if kind == "drained":
        return f"Timeout when waiting for {host}:{port} to drain"
    if kind in ("port", "banner"):
        if not waiting_for(kind, args):
            return f"Timeout when waiting for {host}:{port} to stop."
        if kind == "banner":
            return f"Timeout when waiting for search string {regex} in {host}:{port}"
        return f"Timeout when waiting for {host}:{port}"
    if not waiting_for(kind, args):
        return f"Timeout when waiting for {path} to be absent."
    if kind == "regex":
        return f"Timeout when waiting for search string {regex} in {path}"
    return f"Timeout when waiting for file {path}"


def describe(kind: str, args: dict) -> str:
    """What is awaited, for progress lines and check mode."""
    there = waiting_for(kind, args)
    if kind == "port":
        return f"port {args['host']}:{args['port']} to be {'open' if there else 'closed'}"
    if kind == "banner":
        return f"port {args['host']}:{args['port']} to send text matching {args['search_regex']!r}"
    if kind == "drained":
        return f"the connections to {args['host']}:{args['port']} to end"
    if kind == "path":
        return f"{args['path']} to be {'present' if there else 'absent'}"
    where = f" after byte {args['from_offset']}" if args["from_offset"] else ""
    return f"{args['path']} to contain a match for {args['search_regex']!r}{where}"


def probe_port(host: str, port: int, timeout: float) -> tuple[bool, str]:
    """(open, why): whether a TCP connect succeeds."""
    try:
        with socket.create_connection((host, port), timeout=max(0.05, timeout)) as s:
            _shutdown(s)
            return True, "connected"
    except socket.timeout:
        return False, "connect timed out"
    except OSError as exc:
        return False, exc.strerror or str(exc)


def _shutdown(s: socket.socket) -> None:
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError as exc:
        if exc.errno != errno.ENOTCONN:
            raise


def read_banner(host: str, port: int, rx: re.Pattern, connect_timeout: float, deadline: float) -> tuple[re.Match | None, str]:
    """Connect and read until the text matches rx, the server closes, or the deadline: (match, why)."""
    try:
        s = socket.create_connection((host, port), timeout=max(0.05, connect_timeout))
    except socket.timeout:
        return None, "connect timed out"
    except OSError as exc:
        return None, exc.strerror or str(exc)
    data = b""
    with s:
        while time.monotonic() < deadline and len(data) < SOCKET_READ_LIMIT:
            readable = select.select([s], [], [], max(0.0, deadline - time.monotonic()))[0]
            if not readable:
                continue
            try:
                chunk = s.recv(4096)
            except OSError as exc:
                return None, f"reading failed: {exc.strerror or exc}"
            if not chunk:
                return None, f"the server closed the connection after {len(data)} bytes without a match"
            data += chunk
            m = rx.search(data)
            if m is not None:
                try:
                    _shutdown(s)
                except OSError:
                    pass
                return m, "matched"
    return None, f"no match in {len(data)} bytes read"


def _hex_addresses(host: str) -> list[tuple[int, str]]:
    """Ansible's _convert_host_to_hex: host's addresses (an IPv4 one also as IPv4-mapped IPv6) as /proc/net/tcp
    writes them."""
    try:
        infos = socket.getaddrinfo(host, 80, 0, 0, socket.SOL_TCP)
    except OSError as exc:
        raise ModuleError(f"module 'wait_for': cannot resolve {host!r}: {exc}")
    out = []
    for family, _type, _proto, _name, sockaddr in infos:
        pairs = [(family, sockaddr[0])]
        if family == socket.AF_INET:
            pairs.append((socket.AF_INET6, "::ffff:" + sockaddr[0]))
        for fam, ip in pairs:
            raw = binascii.b2a_hex(socket.inet_pton(fam, ip))
            out.append((fam, "".join(f"{socket.ntohl(int(raw[i:i + 8], 16)):08X}" for i in range(0, len(raw), 8))))
    return out


def active_connections(host: str, port: int, states: list, exclude: list) -> int:
    """Connections to host:port in one of the states, as Ansible's LinuxTCPConnectionInfo counts them."""
    ips = set(_hex_addresses(host))
    excluded = {pair for h in exclude for pair in _hex_addresses(str(h))}
    wanted = {STATE_IDS[s] for s in states}
    hex_port = f"{port:04X}"
    count = 0
    for family, source in PROC_TCP.items():
        try:
            with open(source) as fh:
                lines = fh.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 4 or fields[3] not in wanted:
                continue
            local_ip, _, local_port = fields[1].partition(":")
            remote_ip = fields[2].partition(":")[0]
            if local_port != hex_port or (family, remote_ip) in excluded:
                continue
            if ((family, local_ip) in ips or (family, MATCH_ALL[family]) in ips
                    or (local_ip.startswith(MAPPED_PREFIX) and (family, MAPPED_ALL) in ips)):
                count += 1
    return count


class FileSearch:
    """Incremental regex search in a growing file, from a byte offset."""

    def __init__(self, path: str, pattern: str, offset: int) -> None:
        self.path = path
        self.rx = re.compile(pattern.encode("utf-8"), re.MULTILINE)
        self.start = offset
        self.pos = offset  # next byte to read
        self.buf = b""  # bytes from buf_start to pos, kept for matches across reads
        self.buf_start = offset
        self.size: int | None = None
        self.why = "not read yet"

    def step(self) -> re.Match | None:
        try:
            with open(self.path, "rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                self.size = size
                if size < self.pos:  # rotated or truncated: start again at its beginning
                    self.pos = self.buf_start = 0
                    self.buf = b""
                fh.seek(self.pos)
                new = fh.read()
        except FileNotFoundError:
            self.why = "the file does not exist"
            return None
        except IsADirectoryError:
            raise ModuleError(f"module 'wait_for': {self.path} is a directory; search_regex needs a file")
        except PermissionError:
            raise ModuleError(f"module 'wait_for': cannot read {self.path} (permission denied); fix its mode or the path")
        except OSError as exc:
            raise ModuleError(f"Failed to stat {self.path}, {exc.strerror}")
        self.why = f"no match in {max(0, (self.size or 0) - self.start)} bytes read"
        if not new and self.buf:
            return None
        self.pos += len(new)
        self.buf += new
        m = self.rx.search(self.buf)
        if m is None and len(self.buf) > CARRY_BYTES:
            drop = len(self.buf) - CARRY_BYTES
            self.buf = self.buf[drop:]
            self.buf_start += drop
        return m

    def tail(self, n: int = 5) -> str:
        lines = [ln for ln in self.buf.decode("utf-8", errors="replace").splitlines() if ln.strip()]
        return "\n".join(lines[-n:])


def path_state(path: str, there: bool) -> tuple[bool, str]:
    """(done, why) for a path: present follows links (os.stat, as Ansible's); an error other than a missing path
    fails at once when waiting for it to be there (Ansible's "Failed to stat")."""
    if not there:
        exists = os.access(path, os.F_OK)
        return not exists, "it exists" if exists else "it does not exist"
    try:
        os.stat(path)
    except OSError as exc:
        if exc.errno != errno.ENOENT:
            raise ModuleError(f"Failed to stat {path}, {exc.strerror}")
        return False, "it does not exist"
    return True, "it exists"


def _text(b: bytes | None) -> str | None:
    return None if b is None else b.decode("utf-8", errors="replace")


def success(kind: str, args: dict, start: float, m: re.Match | None, search: FileSearch | None, what: str) -> dict:
    elapsed_s = round(time.monotonic() - start, 3)
    result = {"changed": False, "state": args["state"], "port": args["port"], "path": args["path"],
              "search_regex": args["search_regex"], "match_groups": [], "match_groupdict": {},
              "elapsed": int(elapsed_s), "elapsed_s": elapsed_s,
              "msg": f"waited {elapsed_s} s for {what}" if kind != "sleep" else f"slept {elapsed_s} s"}
    if args["path"] is not None:  # Ansible's AnsibleModule adds these (state: file, directory, link, hard)
        result.update(path_info(args["path"]))
    if kind == "regex" and m is not None and search is not None:
        groups = [_text(g) for g in m.groups()]
        result.update(match_groups=groups, match_groupdict={k: _text(v) for k, v in m.groupdict().items()},
                      match=_text(m.group(0)), groups=groups, match_end_offset=search.buf_start + m.end())
    return result


def run(args: dict, ctx: Context) -> dict:
    kind = plan(args)
    start = time.monotonic()
    try:
        return wait(kind, args, ctx, start)
    except ModuleError as exc:  # a failure on the way (Failed to stat ...) says how long it waited, as Ansible's
        exc.data.setdefault("elapsed", int(time.monotonic() - start))
        exc.data.setdefault("elapsed_s", round(time.monotonic() - start, 3))
        raise


def wait(kind: str, args: dict, ctx: Context, start: float) -> dict:
    what = describe(kind, args)
    timeout, sleep = args["timeout"], max(0.01, args["sleep"])
    if kind == "sleep":
        if ctx.check:
            return {"changed": False, "state": args["state"], "port": None, "path": None, "search_regex": None,
                    "match_groups": [], "match_groupdict": {}, "elapsed": 0, "elapsed_s": 0.0,
                    "msg": f"check mode: a real run would sleep {args['delay'] + timeout} s"}
        time.sleep(args["delay"] + timeout)
        return success(kind, args, start, None, None, what)
    search = FileSearch(args["path"], args["search_regex"], args["from_offset"]) if kind == "regex" else None
    rx = re.compile(args["search_regex"].encode("utf-8"), re.MULTILINE) if kind == "banner" else None
    there = waiting_for(kind, args)
    if args["delay"] and not ctx.check:
        time.sleep(args["delay"])
    deadline = start + timeout
    next_say = start + PROGRESS_EVERY_S
    m = None
    why = ""
    while True:
        now = time.monotonic()
        connect_timeout = min(args["connect_timeout"], max(0.05, deadline - now))
        if kind == "port":
            is_open, why = probe_port(args["host"], args["port"], connect_timeout)
            done = is_open == there
            if not done and not there:
                why = "something still accepts connections"
        elif kind == "banner":
            m, said = read_banner(args["host"], args["port"], rx, connect_timeout, deadline)
            done = m is not None
            why = why if said == "no match in 0 bytes read" and why else said  # cut by the deadline: the last word
        elif kind == "drained":
            left = active_connections(args["host"], args["port"], args["active_connection_states"],
                                      args["exclude_hosts"] or [])
            done, why = left == 0, f"{left} connection(s) left"
        elif kind == "path":
            done, why = path_state(args["path"], there)
        elif search is not None:
            m = search.step()
            done, why = m is not None, search.why
        else:
            raise ModuleError(f"module 'wait_for': nothing to look at for {kind!r}")
        if done:
            return success(kind, args, start, m, search, what)
        elapsed_s = round(time.monotonic() - start, 3)
        if ctx.check:
            return {
                "changed": False,
                "elapsed": int(elapsed_s),
                "elapsed_s": elapsed_s,
                "satisfied": False,
                "msg": f"check mode: not yet {what} ({why}); a real run would wait up to {timeout} s",
            }
        now = time.monotonic()
        if now >= deadline:
            if args["msg"] is not None:
                raise ModuleError(args["msg"], elapsed=int(elapsed_s), elapsed_s=elapsed_s)
            tail = search.tail() if search else ""
            quote = f"; last lines read:\n{tail}" if tail else ""
            raise ModuleError(
                f"{timeout_message(kind, args)} (waited {elapsed_s} s of timeout {timeout} s: {why}){quote}",
                elapsed=int(elapsed_s), elapsed_s=elapsed_s,
            )
        if now >= next_say:
            ctx.say(f"waiting for {what} ({now - start:.0f} s of {timeout} s)")
            next_say = now + PROGRESS_EVERY_S
        time.sleep(min(sleep, max(0.0, deadline - now)))


if __name__ == "__main__":
    main(ARGS, run)
