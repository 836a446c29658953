"""One node of a multi-node vLLM (vLLM's own launcher: --nnodes, --node-rank, --master-addr, --headless; no Ray).

Every node runs the same `vllm serve` with its own rank; rank 0 (the head) serves the API, the others run
headless. The head answers /health 200 even after a worker node died (until a request reaches the engine),
so a node is judged here by what runs on it: its local worker processes (descendants of the pidfile's
process named VLLM::Worker*), their count against the local world size ((TP x PP) / nnodes), and, on a
worker node, each one's ESTABLISHED TCP connection to the head's master_addr:master_port.

The settings are checked as a group when the launch is resolved (cluster_settings, check_node_address);
a headless node is ready once its log shows vLLM's headless launch line (headless_launch). Used by
vllm.launch, vllm.render, vllm.start, vllm.ready, vllm.server, vllm.status and vllm.node.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from typing import Any

import psutil

from dflash_host.host.processes import alive
from dflash_host.module import ModuleError
from dflash_host.vllm.log import split_prefix
from dflash_host.vllm.records import read_launch

# The settings that make the launch a node of a cluster (ARGS names; the variables are cluster_*).
NODE_SETTINGS = ("nnodes", "node_rank", "master_addr", "master_port", "headless")
# vLLM 0.32: "Launching vLLM (v0.32.0) headless multiproc executor, with head node address H:P for ..." (a
# worker node of multi-node TP/PP) or "Launching 1 data parallel engine(s) in headless mode, ..." (DP).
HEADLESS_LINE = re.compile(r"\bLaunching\b.*\bheadless\b", re.I)
DEFAULT_TITLE_PREFIX = "VLLM"  # vLLM's VLLM_PROCESS_NAME_PREFIX; workers are PREFIX::Worker[_PP0][_TP1]


def _given(value: Any) -> bool:
    return value is not None and value is not False


# --------------------------------------------------------------------------- the settings, as a group


def _check_group(nnodes: int, rank: int, headless: bool, master: str | None, tp: int, pp: int) -> None:
    if nnodes > 1 and not master:
        raise ModuleError(
            f"cluster_nnodes is {nnodes}, so every node needs the head's address: set cluster_master_addr to the "
            "address of the node with cluster_node_rank 0, reachable from every node and the same on all of them"
        )
    if rank >= nnodes:
        raise ModuleError(
            f"cluster_node_rank is {rank}, but cluster_nnodes is {nnodes}: ranks go from 0 (the head) to "
            f"{nnodes - 1}; give each node its own rank below cluster_nnodes (or raise cluster_nnodes)"
        )
    if headless and rank == 0:
        raise ModuleError(
            "cluster_headless is true on cluster_node_rank 0: rank 0 is the head, which serves the API; set "
            "cluster_headless: false there (only nodes with a rank above 0 run headless)"
        )
    if (tp * pp) % nnodes:
        raise ModuleError(
            f"tensor_parallel_size ({tp}) x pipeline_parallel_size ({pp}) = {tp * pp} workers cannot be split "
            f"evenly over cluster_nnodes ({nnodes}) nodes; choose sizes whose product is a multiple of "
            f"cluster_nnodes (e.g. tensor_parallel_size {nnodes} with pipeline_parallel_size 1)"
        )


def cluster_settings(values: dict) -> dict | None:
    """The launch's cluster record from the checked flag values; None without cluster_nnodes (one host, the
    launch record unchanged). ModuleError naming the variable when the settings do not fit together."""
    if not any(_given(values.get(k)) for k in NODE_SETTINGS):
        return None
    nnodes = values.get("nnodes") or 1
    rank = values.get("node_rank") or 0
    headless = bool(values.get("headless"))
    tp, pp = values.get("tensor_parallel_size") or 1, values.get("pipeline_parallel_size") or 1
    master = values.get("master_addr")
    _check_group(nnodes, rank, headless, master, tp, pp)
    if not _given(values.get("nnodes")):
        return None  # e.g. a master port alone: checked, written, but no node of a cluster
    return {
        "nnodes": nnodes,
        "node_rank": rank,
        "role": "worker" if headless else "head",
        "headless": headless,
        "master_addr": master,
        "master_port": values.get("master_port"),
        "tensor_parallel_size": tp,
        "pipeline_parallel_size": pp,
        "world_size": tp * pp,
        "local_world_size": tp * pp // nnodes,
    }


def wants_cluster(values: dict) -> bool:
    """Whether these settings make the launch a node of a cluster (cluster_nnodes given), as cluster_settings says."""
    return _given(values.get("nnodes"))


def _is_loopback(address: str) -> bool:
    if address.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(address.strip()).is_loopback
    except ValueError:
        return False  # a host name: assume it names another host


def check_node_address(cluster: dict | None, env: dict) -> None:
    """A node of several hosts must not announce a loopback address (the cpu flavor's default 127.0.0.1): the
    head's message queue binds VLLM_HOST_IP, which the other hosts could not reach."""
    if not cluster or cluster["nnodes"] < 2:
        return
    host_ip = env.get("VLLM_HOST_IP")
    if host_ip and _is_loopback(host_ip) and not _is_loopback(cluster["master_addr"] or ""):
        raise ModuleError(
            f"this node would run with VLLM_HOST_IP={host_ip} (a loopback address, the cpu flavor's default), but "
            f"the head is at {cluster['master_addr']}: the other nodes could not reach it. Set cluster_node_address "
            "to this node's own address on the cluster network"
        )


def is_headless(launch: dict | None) -> bool:
    return bool(((launch or {}).get("cluster") or {}).get("headless"))


def node_name(cluster: dict) -> str:
    """'node rank 1' (worker) or 'node rank 0 (head)': how a node is named in messages."""
    return f"node rank {cluster['node_rank']}" + (" (head)" if cluster["role"] == "head" else "")


def group_name(cluster: dict) -> str:
    """The cluster's inventory group as recorded at render (cluster_group), else words a person replaces."""
    return str(cluster.get("group") or "<the cluster's group>")


def leaving_cluster(cluster: dict, launch_file: str, host: str | None) -> str:
    """Why a one-host launch may not replace a cluster node's (one paragraph): the node would restart alone as a
    one-host server and its cluster would lose it, and what to run instead."""
    group, host = group_name(cluster), host or "<this host>"
    kind = "the head" if cluster.get("role") == "head" else "a headless node"
    return (
        f"this host is node rank {cluster.get('node_rank')} of {cluster.get('nnodes')} ({kind}) of a serving cluster "
        f"(group {group}, head {cluster.get('master_addr')}; its launch is {launch_file}), and this run would replace "
        "that launch by a one-host launch (cluster_nnodes unset) and restart the host as a one-host server, taking it "
        "out of its cluster; nothing was changed. To change or restart the cluster, run `invoke serving-cluster "
        f"--group {group}` (with -e cluster_restart=true it restarts every node); "
        f"to make this host a one-host server, run `invoke teardown --host {host}` first (the cluster's other nodes "
        f"then run without it: `invoke teardown --group {group}` stops them); a run over a whole fleet leaves the "
        f"cluster out with --limit 'all:!{group}'"
    )


def refuse_node(p: dict, host: str | None) -> None:
    """A one-host launch never replaces a serving cluster node's (the launch record beside the pidfile says it
    is one): refused before anything is stopped, built or written, naming the node and what to run."""
    cluster = (read_launch(p["launch"]) or {}).get("cluster")
    if isinstance(cluster, dict):
        raise ModuleError(leaving_cluster(cluster, p["launch"], host), cluster=cluster)


# --------------------------------------------------------------------------- what the log says


def headless_launch(lines: list) -> str | None:
    """vLLM's headless launch line among `lines` (its message without the log prefix), else None."""
    for line in lines:
        msg = split_prefix(line)[1]
        if HEADLESS_LINE.search(msg):
            return msg.strip()
    return None


# --------------------------------------------------------------------------- what runs on this node


def title_prefix(launch: dict) -> str:
    """PREFIX::Worker, PREFIX being the launch's VLLM_PROCESS_NAME_PREFIX (vLLM's default VLLM)."""
    env = launch.get("env") or {}
    return f"{env.get('VLLM_PROCESS_NAME_PREFIX') or DEFAULT_TITLE_PREFIX}::Worker"


def _is_worker(proc: psutil.Process, prefix: str) -> bool:
    """vLLM names its workers with setproctitle: the name (comm, 15 characters) and argv[0] carry the title."""
    try:
        with proc.oneshot():
            cmdline = proc.cmdline()
            return proc.name().startswith(prefix) or bool(cmdline and cmdline[0].startswith(prefix))
    except psutil.Error:
        return False


def node_processes(now: dict) -> list:
    """The server's live processes from an inspect: the proven ones (pidfile), else the top one's descendants."""
    procs = list(now.get("procs") or [])
    if not procs and now.get("pid"):
        try:
            top = psutil.Process(now["pid"])
            procs = [top] + top.children(recursive=True)
        except psutil.Error:
            return []
    return [x for x in procs if alive(x)]


def head_addresses(master: str) -> set:
    """The addresses master_addr stands for (a name resolved; itself when it does not resolve)."""
    out = {master}
    try:
        out |= {str(info[4][0]) for info in socket.getaddrinfo(master, None, proto=socket.IPPROTO_TCP)}
    except (OSError, UnicodeError):
        pass
    return out


def _tcp_connections(proc: psutil.Process) -> list:
    reader = getattr(proc, "net_connections", None) or proc.connections  # psutil < 6 has only connections()
    return reader(kind="tcp")


def connected(proc: psutil.Process, addresses: set, port: int | None) -> bool | None:
    """Whether `proc` holds an ESTABLISHED TCP connection to one of `addresses` (at `port` when known);
    None when its sockets cannot be read (another user's process)."""
    try:
        conns = _tcp_connections(proc)
    except psutil.AccessDenied:
        return None
    except psutil.Error:
        return False
    for c in conns:
        if c.status != psutil.CONN_ESTABLISHED or not c.raddr:
            continue
        ip = c.raddr.ip[7:] if c.raddr.ip.startswith("::ffff:") else c.raddr.ip
        if ip in addresses and (port is None or c.raddr.port == port):
            return True
    return False


def local_workers(launch: dict, now: dict) -> list:
    """[{pid, name, connected}] of the node's live worker processes; `connected` is about the head's
    master_addr:master_port (any port of it when cluster_master_port is unset), None without a master."""
    cluster = launch.get("cluster") or {}
    prefix = title_prefix(launch)
    master = cluster.get("master_addr")
    addresses = head_addresses(master) if master else set()
    out = []
    for proc in node_processes(now):
        if not _is_worker(proc, prefix):
            continue
        try:
            name = proc.name()
        except psutil.Error:
            continue
        link = connected(proc, addresses, cluster.get("master_port")) if master else None
        out.append({"pid": proc.pid, "name": name, "connected": link})
    return sorted(out, key=lambda w: w["pid"])


def missing_workers(cluster: dict, workers: list) -> str | None:
    """What a node lacks, in words ('0 of 1 local workers running'), else None. A worker node's workers must
    each hold a connection to the head; the head's are reported, not required (their link is to themselves)."""
    want = cluster["local_world_size"]
    if len(workers) != want:
        return f"{len(workers)} of {want} local workers running"
    if cluster["role"] == "worker":
        loose = [w["pid"] for w in workers if w["connected"] is False]
        if loose:
            where = f"{cluster['master_addr']}:{cluster['master_port'] or '(any port)'}"
            return f"{len(loose)} of {want} local workers not connected to the head at {where} (PIDs {loose})"
    return None
