"""Which channel reaches a host: the local one, an SSH connection of the run's own, or the kept-connection daemon's
(ControlPersist), a silent daemon bypassed; and the same choice's refusals checked before any host is touched.

Above transport.py (the channels) and persist.py (the daemon's side): the one place that knows both."""

from __future__ import annotations

from engine.connection.persist import PersistentTransport, daemon_usable, socket_path
from engine.connection.ssh_options import Hop, SshOptionError, resolve
from engine.connection.transport import DaemonSilent, LocalTransport, SSHTransport, Transport
from engine.errors import HostUnreachable, UserError
from engine.inventory.manager import Host

SSH_CONNECTIONS = ("ssh", "paramiko", "smart")  # ansible_connection values reached over SSH


def _ssh_transport(host: Host, hop: Hop) -> Transport:
    """Through the kept-connection daemon when the hop is kept (ControlPersist) and, where only the tool's default
    keeps it, the daemon can be reached or started here; else a connection of the run's own."""
    if hop.persist_s is None:
        return SSHTransport(host, hop)
    if hop.persist_default and not daemon_usable():
        return SSHTransport(host, hop)
    return PersistentTransport(host, hop)


def connect(host: Host) -> Transport:
    """Open a transport for a host. Connection errors other than refusals propagate for retry."""
    kind = host.connection
    if kind == "local":
        t: Transport = LocalTransport(host)
    elif kind in SSH_CONNECTIONS:
        t = _ssh_transport(host, resolve(host))
    else:
        raise HostUnreachable(f"ansible_connection '{kind}' is not supported; use ssh or local")
    try:
        t.open()
    except DaemonSilent as exc:
        return _bypass(host, t, exc)
    return t


def _bypass(host: Host, kept: Transport, exc: DaemonSilent) -> Transport:
    """A kept-connection daemon that does not answer is bypassed: a connection of the run's own to the host, the
    daemon named among its notes (engine/run/host_start.py shows them as the host's warnings)."""
    direct = SSHTransport(host, getattr(kept, "hop", None))
    direct.notes.append(f"{exc.strerror}; {host.name} was reached by a connection of this run's own instead")
    direct.open()
    return direct


def check_ssh_settings(host: Host) -> None:
    """For checks before any host is touched: the same refusals as a UserError (exit 4)."""
    if host.connection not in SSH_CONNECTIONS:
        return
    try:
        hop = resolve(host)
    except SshOptionError as exc:
        raise UserError(str(exc)) from None
    if hop.persist_s is not None and not hop.persist_default:
        socket_path()  # a kept connection's socket folder others could enter, or a path too long: refused here
