"""The managed vLLM server, behind one narrow front: what a server is, never how it is made.

Everything outside dflash_host/vllm/ (the task modules in library/, dflash_host/speed/) imports these names
only, and only from here (tests/library/test_imports.py); the parts are private to the package.

  the configured server  render(args, ctx, table), ensure_running(args, ctx, force), stop(args, ctx, absent),
                         status(args): library/vllm_server's states and library/vllm_status's report;
                         stop_owner(pidfile, ctx, grace_s, unit): its owner's stop without a launch (gpu_cleanup)
  a cluster node         probe_node(args), verify_node(args, ctx), refuse_one_host(args): library/vllm_cluster
  a measurement server   start_measurement, stop_measurement, forget_measurement (args, ctx): library/vllm_variant
  read from outside      paths(pidfile) and the one readers of the files beside it: read_launch(path) (the
                         launch record: the tool's, or None), read_env(paths); launch_state(launch, paths):
                         whether the server runs and was started from that launch (the host agent, dflash_host.monitor)
  its API and counters   base_url(host, port), request(url, ...); spec_decode_counters, delta, acceptance,
                         per_position_counts (vLLM's /metrics, for the speed measurements)
  what this vLLM offers  vllm_facts(venv_python, server_env): its version and features, asked of its files

The parts, each with one job (they import one another directly, never this front):
  values        checks on every value placed in argv, environment or unit (one line, no managed flag)
  launch        the task's arguments -> the launch: argv, environment, models located on the host
  records       the files beside the pidfile (launch, running, env) and how each proves it is the tool's
  systemd_unit  the unit's text and whether the server runs under systemd (the mode)
  render        the launch record, env file and unit written where they differ; the fingerprint
  process       the running server by mode (a process session or a unit) and watching it while it starts
  start         a free port, the log rotated, the spawn recorded, then proven ready
  ready         readiness, smoke completions and the drafter's acceptance, under the watch
  probe         the server's HTTP API (/health, /v1/models, /v1/completions, /metrics) and port owners
  log           the server's log: markers, fatal lines and the root cause, rotation
  metrics       spec-decode counters from /metrics and the acceptance they give
  cluster       a multi-node server: head and headless nodes, their workers
  features      what the serving environment's vLLM offers (version, dynamic k, bench serve's datasets)
  server        the configured server's life: render, ensure_running, stop
  status        its state for `invoke status`
  node          a cluster node's probe, verify and one-host refusal
  variant       a measurement server: its places, its launch from the configured one, where it fits
  measurement   a measurement server's life: started, stopped (the configured one restored), forgotten
"""

from dflash_host.vllm.features import vllm_facts
from dflash_host.vllm.measurement import forget_measurement, start_measurement, stop_measurement
from dflash_host.vllm.metrics import acceptance, delta, per_position_counts, prefix_cache_counters, spec_decode_counters
from dflash_host.vllm.node import probe_node, refuse_one_host, verify_node
from dflash_host.vllm.probe import base_url, request
from dflash_host.vllm.process import stop_owner
from dflash_host.vllm.records import launch_state, paths, read_env, read_launch
from dflash_host.vllm.server import ensure_running, render, stop
from dflash_host.vllm.status import status
from dflash_host.vllm.systemd_unit import program_unit

__all__ = [
    # the configured server
    "render", "ensure_running", "stop", "status", "stop_owner",
    # a node of a serving cluster
    "probe_node", "verify_node", "refuse_one_host",
    # a measurement server
    "start_measurement", "stop_measurement", "forget_measurement",
    # the files beside a pidfile, read from outside
    "paths", "read_launch", "read_env", "launch_state",
    # its HTTP API and vLLM's /metrics
    "base_url", "request", "spec_decode_counters", "delta", "acceptance", "per_position_counts",
    "prefix_cache_counters",
    # what the serving environment's vLLM offers
    "vllm_facts",
    # a unit for another program the tool keeps running (the monitor agent), quoted as the server's
    "program_unit",
]
