"""Opening the SSH connection to a host: route (direct, jump hosts, ProxyCommand), keys, host-key checking,
and what each refusal means.

engine/connection/transport.py starts the worker on the connection this returns; engine/connection/ssh_options.py decides the route and
each hop's settings from the inventory, the ssh arguments and the ssh config, as Ansible + OpenSSH would.
"""

from __future__ import annotations

import errno
import logging
import os
import signal
import socket
import subprocess
import threading
from collections import deque
from typing import Any

from engine.connection.ssh_options import Hop, ProxyCommandSpec, resolve
from engine.errors import HostUnreachable
from engine.inventory.manager import Host

# paramiko's transport thread logs a failed handshake with its traceback (Python's last-resort handler prints
# it): the run says what happened in one paragraph instead (_refusal).
_PARAMIKO_LOG = logging.getLogger("paramiko")
_PARAMIKO_LOG.addHandler(logging.NullHandler())
_PARAMIKO_LOG.propagate = False


class _QuickAckSocket(socket.socket):
    """A TCP socket that ACKs at once on every read (Linux does not keep TCP_QUICKACK on).

    sshd sets TCP_NODELAY only for interactive sessions, so when it sends two small packets in a row
    (during key exchange; the channel confirmation then the exec reply) the second waits for our ACK of
    the first, which Linux delays by up to 40 ms. Measured: open 80 -> 25-35 ms, session+exec 48 -> 5 ms.
    """

    def recv(self, bufsize: int, *flags: int) -> bytes:
        try:
            self.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)
        except (OSError, AttributeError):
            pass
        return super().recv(bufsize, *flags)


def failure_reason(exc: Exception) -> str:
    """The socket-level reason of a failed connect (paramiko wraps it in NoValidConnectionsError)."""
    errors = getattr(exc, "errors", None)
    if isinstance(errors, dict) and errors:
        first = next(iter(errors.values()))
        return first.strerror or str(first)
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return f"{type(exc).__name__}: {exc}"


def tcp_socket(address: str, port: int, timeout: float) -> socket.socket:
    """A connected socket with TCP_NODELAY (and quick ACKs) from the first packet of the handshake."""
    last: OSError | None = None
    for family, kind, proto, _, addr in socket.getaddrinfo(address, port, type=socket.SOCK_STREAM):
        sock = _QuickAckSocket(family, kind, proto)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.settimeout(timeout)
            sock.connect(addr)
            return sock
        except OSError as exc:
            sock.close()
            last = exc
    raise last or OSError(f"no address for {address}")


class _AcceptUnknown:
    """Host key policy for StrictHostKeyChecking no / `ansible_host_key_checking: false`: accept, remember nothing."""

    def missing_host_key(self, client, hostname, key) -> None:  # paramiko policy API
        return None


class _AcceptNew:
    """StrictHostKeyChecking accept-new: an unknown key is added to the first known_hosts file; a changed one is
    still refused (paramiko raises BadHostKeyException before asking the policy)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def missing_host_key(self, client, hostname, key) -> None:
        os.makedirs(os.path.dirname(self.path) or ".", mode=0o700, exist_ok=True)
        with open(self.path, "a", encoding="ascii") as f:
            f.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")


class _ChannelSocket:
    """A direct-tcpip channel through a jump host, used as the next hop's socket.

    There is no TCP socket here (the jump host's connection carries it), so setsockopt is a no-op:
    engine/connection/transport.py sets TCP_NODELAY on whatever socket the connection has.
    """

    def __init__(self, channel) -> None:
        self._channel = channel

    def __getattr__(self, name: str):
        return getattr(self._channel, name)

    def setsockopt(self, *args: Any) -> None:
        return None


class _ProxyCommandSocket:
    """A ProxyCommand run as OpenSSH runs it (`sh -c 'exec COMMAND'`) used as the socket; its stderr is kept
    for error messages, and its end of output ends reads (paramiko's ProxyCommand would spin until a timeout)."""

    def __init__(self, command: str, cwd: str | None = None) -> None:
        self.command = command
        self.process = subprocess.Popen(["/bin/sh", "-c", f"exec {command}"], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0, cwd=cwd)
        assert self.process.stdin and self.process.stdout and self.process.stderr  # noqa: S101 - all three are PIPE
        self._stdin, self._stdout, self._stderr = self.process.stdin, self.process.stdout, self.process.stderr
        self.stderr_tail: deque[str] = deque(maxlen=20)
        self.timeout: float | None = None
        self._drainer = threading.Thread(target=self._drain_stderr, daemon=True)
        self._drainer.start()

    def _drain_stderr(self) -> None:
        for line in iter(self._stderr.readline, b""):
            self.stderr_tail.append(line.decode("utf-8", "replace").rstrip())

    def send(self, data: bytes) -> int:
        try:
            self._stdin.write(data)
        except OSError as exc:
            raise OSError(errno.EPIPE, f"the ProxyCommand ended ({exc.strerror})") from None
        return len(data)

    def recv(self, size: int) -> bytes:
        import select

        ready, _, _ = select.select([self._stdout], [], [], self.timeout)
        if not ready:
            raise socket.timeout()
        return os.read(self._stdout.fileno(), size)  # b"" once the command ends: the connection ended

    def settimeout(self, timeout: float | None) -> None:
        self.timeout = timeout

    def setsockopt(self, *args: Any) -> None:
        return None

    @property
    def _closed(self) -> bool:
        return self.process.poll() is not None

    closed = _closed

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        for stream in (self._stdin, self._stdout):
            try:
                stream.close()
            except OSError:
                pass

    def why_it_ended(self) -> str:
        try:
            self.process.wait(timeout=2)  # it has closed its output: let it finish saying why
        except subprocess.TimeoutExpired:
            pass
        self._drainer.join(timeout=1)
        tail = " | ".join(list(self.stderr_tail)[-3:])
        code = self.process.returncode
        return (f"exit status {code}" if code is not None else "still running") + (f", said: {tail}" if tail else "")


class SshConnection:
    """One authenticated hop: a paramiko SSHClient, and the jump hosts it was reached through (closed with it).

    Plain paramiko, not fabric's Connection: fabric's object re-reads the ssh config for every connection, checks
    no host key unless told to (AutoAddPolicy, no known_hosts read), and costs 2-3 ms more control-node CPU a host
    (bench/fabric_connection.py; docs/ARCHITECTURE.md, "Fabric")."""

    def __init__(self, client, jumps: list) -> None:
        self.client = client
        self._jumps = jumps
        self._sftp = None

    @property
    def is_connected(self) -> bool:
        transport = self.client.get_transport()
        return bool(transport and transport.is_active())

    def sftp(self):
        if self._sftp is None:
            self._sftp = self.client.open_sftp()
        return self._sftp

    def close(self) -> None:
        try:
            self.client.close()
        finally:
            for jump in reversed(self._jumps):
                jump.close()


def _connect_kwargs(hop: Hop, sock) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"hostname": hop.hostname, "port": hop.port, "username": hop.user, "sock": sock,
                              "timeout": hop.timeout, "banner_timeout": hop.timeout, "auth_timeout": hop.timeout}
    if hop.identity_files:
        kwargs["key_filename"] = list(hop.identity_files)
        kwargs["look_for_keys"] = False
    if hop.password:
        kwargs["password"] = hop.password
    if hop.compress:
        kwargs["compress"] = True
    return kwargs


SYSTEM_KNOWN_HOSTS = "/etc/ssh/ssh_known_hosts"
_KNOWN_HOSTS: dict[str, tuple[tuple[int, int], Any]] = {}
_KNOWN_HOSTS_LOCK = threading.Lock()


def _parsed_known_hosts(path: str):
    """A known_hosts file parsed once per run (again only when it changes): parsing it for every host grew with
    the square of the fleet (3 ms a host at 100 hosts)."""
    import paramiko

    st = os.stat(path)
    stamp = (st.st_mtime_ns, st.st_size)
    with _KNOWN_HOSTS_LOCK:
        cached = _KNOWN_HOSTS.get(path)
        if cached is None or cached[0] != stamp:
            cached = (stamp, paramiko.HostKeys(path))
            _KNOWN_HOSTS[path] = cached
    return cached[1]


def _set_host_key_policy(client, hop: Hop) -> None:
    """The hop's known keys (from every known_hosts file, the first file's entry winning per key type) given to
    the client; unknown keys refused (or accepted and recorded with accept-new, or accepted with 'no')."""
    import paramiko

    if hop.checking == "no":
        client.set_missing_host_key_policy(_AcceptUnknown())
        return
    known = client.get_host_keys()
    for path in hop.known_hosts:
        if hop.checking == "accept-new" and not os.path.exists(path):
            continue
        try:
            entry = _parsed_known_hosts(path).lookup(hop.known_name) or {}
        except (OSError, paramiko.SSHException) as exc:
            raise HostUnreachable(f"{hop.label}: cannot read known_hosts file {path}: {exc}") from None
        for keytype, key in entry.items():
            if keytype not in (known.lookup(hop.known_name) or {}):
                known.add(hop.known_name, keytype, key)
    if hop.checking == "accept-new":
        # New keys go to the user's file, never the system-wide one (read when the user's does not exist yet).
        mine = [p for p in hop.known_hosts if p != SYSTEM_KNOWN_HOSTS]
        client.set_missing_host_key_policy(_AcceptNew(mine[0] if mine else os.path.expanduser("~/.ssh/known_hosts")))
    else:
        client.set_missing_host_key_policy(paramiko.RejectPolicy())


def _through(hop: Hop) -> str:
    via = hop.via
    if isinstance(via, Hop):
        return f" (reached through {via.label}, {via.where})"
    if isinstance(via, ProxyCommandSpec):
        return f" (reached through the ProxyCommand {via.command!r})"
    return ""


def _refusal(hop: Hop, exc: Exception, sock, is_target: bool) -> Exception:
    """What a failed SSH handshake with one hop means, in one paragraph naming the hop and the fix."""
    import paramiko

    where = f"{hop.label} ({hop.where}){_through(hop)}"
    files = ", ".join(hop.known_hosts) or "~/.ssh/known_hosts (missing)"
    if isinstance(exc, paramiko.BadHostKeyException):
        return HostUnreachable(
            f"host key of {where} CHANGED: it offered {exc.key.get_name()} {exc.key.get_fingerprint().hex()}, "
            f"known_hosts ({files}) has another key. This may be an attack, or the host was rebuilt; "
            f"if you know it was rebuilt, remove the old key with "
            f"ssh-keygen -R '{hop.known_name}' -f FILE and add the new one.")
    text = str(exc)
    if ("protocol banner" in text or "No existing session" in text) and not isinstance(sock, _ProxyCommandSocket):
        return HostUnreachable(
            f"no SSH banner from {hop.hostname}:{hop.port} within {hop.timeout:g} s ({where}): something accepts TCP "
            "connections there but does not speak SSH (a wrong ansible_port, a firewall or load balancer holding the "
            "connection, or a hung sshd); check the port and the sshd on the host.")
    if "not found in known_hosts" in text or "Server " in text and "not found" in text:
        scan = f"ssh-keyscan -p {hop.port} {hop.hostname}" + (" on the host it is reached through" if hop.via else "")
        return HostUnreachable(
            f"host key of {where} is unknown (not in {files}); refusing to connect. Add it after checking its "
            f"fingerprint ({scan} >> ~/.ssh/known_hosts), set ansible_ssh_known_hosts_file or UserKnownHostsFile, "
            "or set ansible_host_key_checking: false for this host (a jump host: StrictHostKeyChecking in its "
            "ssh config entry).")
    if isinstance(exc, paramiko.AuthenticationException):
        keys = ", ".join(hop.identity_files) or "the default keys and the ssh agent"
        return HostUnreachable(
            f"authentication to {where} failed ({text}; tried {keys}); check ansible_user and "
            "ansible_ssh_private_key_file (a jump host: the user in its spec, its IdentityFile in the ssh config).")
    if isinstance(sock, _ProxyCommandSocket):
        return OSError(errno.ECONNABORTED, f"the ProxyCommand for {where} ended before SSH could talk through it "
                                           f"({sock.why_it_ended()}); run it by hand to see why")
    if hop.via is not None or not is_target:  # retried by engine/connection/client.py, with the hop named
        return OSError(errno.ECONNABORTED, f"SSH with {where} failed: {text}")
    return exc


def _open_hop(hop: Hop, sock, jumps: list, is_target: bool) -> SshConnection:
    """Authenticate one hop over `sock` (a TCP socket, a channel or a proxy command); closes it on failure."""
    import paramiko

    client = paramiko.SSHClient()
    try:
        _set_host_key_policy(client, hop)
        client.connect(**_connect_kwargs(hop, sock))
    except paramiko.SSHException as exc:
        refusal = _refusal(hop, exc, sock, is_target)  # before closing: a ProxyCommand's last words are read
        client.close()
        sock.close()
        raise refusal from None
    except BaseException:
        client.close()
        sock.close()
        raise
    return SshConnection(client, jumps)


def _tcp_to(hop: Hop, is_target: bool) -> socket.socket:
    try:
        return tcp_socket(hop.hostname, hop.port, hop.timeout)
    except OSError as exc:
        if is_target:
            raise  # engine/connection/client.py retries and names the host's address
        raise OSError(exc.errno, f"{hop.label} ({hop.where}) is unreachable: {exc.strerror or exc}; check the "
                                 "ProxyJump spec, the jump host's ssh config entry and that its sshd runs") from None


def _socket_for(hop: Hop, jumps: list, is_target: bool):
    """The stream `hop` is reached on; every jump host opened on the way is appended to `jumps`."""
    import paramiko

    via = hop.via
    if via is None:
        return _tcp_to(hop, is_target)
    if isinstance(via, ProxyCommandSpec):
        return _ProxyCommandSocket(via.command, via.cwd)
    jump = _open_hop(via, _socket_for(via, jumps, False), [], False)
    jumps.append(jump)
    try:
        channel = jump.client.get_transport().open_channel(
            "direct-tcpip", dest_addr=(hop.hostname, hop.port), src_addr=("127.0.0.1", 0), timeout=hop.timeout)
    except (paramiko.ChannelException, paramiko.SSHException, OSError) as exc:
        reason = getattr(exc, "text", None) or str(exc) or type(exc).__name__
        raise OSError(errno.EHOSTUNREACH,
                      f"{via.label} ({via.where}) could not open a connection to {hop.hostname}:{hop.port} for "
                      f"{hop.label} ({reason}); check that ansible_host/ansible_port are as the jump host sees "
                      "them, that sshd runs there, and that the jump host allows TCP forwarding") from None
    return _ChannelSocket(channel)


def open_connection(host: Host, hop: Hop | None = None) -> SshConnection:
    """A connected, authenticated SSH connection; every refusal is a HostUnreachable that says what to do.
    `hop`: the host's route when the caller has resolved it already.

    Closing it also closes the jump hosts it went through.
    """
    return open_route(hop or resolve(host))


def open_route(hop: Hop) -> SshConnection:
    """open_connection for a route already resolved (the kept-connection daemon gets routes, not hosts)."""
    jumps: list = []
    try:
        sock = _socket_for(hop, jumps, True)
        return _open_hop(hop, sock, jumps, True)
    except BaseException:
        for jump in reversed(jumps):
            jump.close()
        raise
