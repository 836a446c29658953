"""Opening the SSH connection to a host: address, user, keys, host-key checking, and what each refusal means.

engine/transport.py starts the worker on the connection this returns; this module owns how a host is reached.
"""

from __future__ import annotations

import os
import shlex
import socket
from typing import Any

from engine.errors import HostUnreachable
from engine.inventory import Host


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


def _tcp_socket(address: str, port: int, timeout: float) -> socket.socket:
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
    """Host key policy for `ansible_host_key_checking: false`: accept, remember nothing."""

    def missing_host_key(self, client, hostname, key) -> None:  # paramiko policy API
        return None


def known_hosts_files(host: Host) -> list[str]:
    given = host.vars.get("ansible_ssh_known_hosts_file")
    if given:
        return [os.path.expanduser(str(given))]
    return [p for p in (os.path.expanduser("~/.ssh/known_hosts"), "/etc/ssh/ssh_known_hosts") if os.path.exists(p)]


def known_name(host: Host) -> str:
    return host.address if host.port == 22 else f"[{host.address}]:{host.port}"


def open_connection(host: Host):
    """A connected, authenticated fabric Connection; every refusal is a HostUnreachable that says what to do."""
    import paramiko
    from fabric import Connection

    v = host.vars
    key_file = v.get("ansible_ssh_private_key_file")
    connect_kwargs: dict[str, Any] = {}
    if key_file:
        connect_kwargs["key_filename"] = [os.path.expanduser(str(key_file))]
        connect_kwargs["look_for_keys"] = False
    if v.get("ansible_password"):
        connect_kwargs["password"] = str(v["ansible_password"])
    timeout = int(v.get("ansible_ssh_timeout", v.get("ansible_timeout", 10)))
    connect_kwargs["sock"] = _tcp_socket(host.address, host.port, timeout)
    conn = Connection(
        host=host.address,
        user=host.user,
        port=host.port,
        connect_timeout=timeout,
        connect_kwargs=connect_kwargs,
    )
    client = conn.client
    checking = v.get("ansible_host_key_checking", True)
    if isinstance(checking, str):
        checking = checking.strip().lower() not in ("false", "no", "0", "off")
    if checking:
        for path in known_hosts_files(host):
            try:
                client.load_system_host_keys(path)
            except (OSError, paramiko.SSHException) as exc:
                raise HostUnreachable(f"cannot read known_hosts file {path}: {exc}") from None
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
    else:
        client.set_missing_host_key_policy(_AcceptUnknown())
    where = f"{host.user + '@' if host.user else ''}{host.address}:{host.port}"
    try:
        conn.open()
    except paramiko.BadHostKeyException as exc:
        files = ", ".join(known_hosts_files(host)) or "~/.ssh/known_hosts"
        raise HostUnreachable(
            f"host key of {where} CHANGED: it offered {exc.key.get_name()} {exc.key.get_fingerprint().hex()}, "
            f"known_hosts ({files}) has another key. This may be an attack, or the host was rebuilt; "
            f"if you know it was rebuilt, remove the old key with "
            f"ssh-keygen -R {shlex.quote(known_name(host))} -f FILE and add the new one."
        ) from None
    except paramiko.SSHException as exc:
        text = str(exc)
        if "not found in known_hosts" in text or "Server " in text and "not found" in text:
            files = ", ".join(known_hosts_files(host)) or "~/.ssh/known_hosts (missing)"
            raise HostUnreachable(
                f"host key of {where} is unknown (not in {files}); refusing to connect. Add it after "
                f"checking its fingerprint (ssh-keyscan -p {host.port} {host.address} >> ~/.ssh/known_hosts), "
                "set ansible_ssh_known_hosts_file, or set ansible_host_key_checking: false for this host."
            ) from None
        if isinstance(exc, paramiko.AuthenticationException):
            raise HostUnreachable(
                f"authentication to {where} failed ({text}); check ansible_user and ansible_ssh_private_key_file"
            ) from None
        raise
    return conn
