"""The managed vLLM server, behind one front: the vLLM task modules import from here, never from the parts.

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
"""

from dflash_host.vllm.cluster import (
    group_name,
    is_headless,
    local_workers,
    missing_workers,
    node_name,
    node_processes,
    refuse_node,
)
from dflash_host.vllm.launch import resolve
from dflash_host.vllm.log import check_log, find_fatal, lines_after_marker, root_cause
from dflash_host.vllm.metrics import acceptance, delta, spec_decode_counters
from dflash_host.vllm.probe import base_url, endpoint, request, served_models
from dflash_host.vllm.process import ProcessServer, ServerFailed, server_for
from dflash_host.vllm.ready import verify_headless, verify_running
from dflash_host.vllm.records import (
    dump,
    files_to_remove,
    launch_state,
    load_launch,
    paths,
    read_env,
    read_launch,
    record_teardown,
    remove_tool_file,
    torn_down,
)
from dflash_host.vllm.render import (
    check_places,
    check_settings,
    files_wanted,
    launch_record,
    models_to_come,
    refuse_foreign_targets,
    refuse_leaving_cluster,
    render_files,
)
from dflash_host.vllm.start import start
from dflash_host.vllm.systemd_unit import SERVICE_NAME, choose_mode, unsupervised_note

__all__ = [
    "SERVICE_NAME", "ProcessServer", "ServerFailed", "acceptance", "base_url", "check_log", "check_places",
    "check_settings", "choose_mode", "delta", "dump", "endpoint", "files_to_remove", "files_wanted", "find_fatal",
    "group_name", "is_headless", "launch_record", "launch_state", "lines_after_marker", "load_launch",
    "local_workers", "missing_workers", "models_to_come", "node_name", "node_processes", "paths", "read_env",
    "read_launch", "record_teardown", "refuse_foreign_targets", "refuse_leaving_cluster", "refuse_node",
    "remove_tool_file", "render_files", "request", "resolve", "root_cause", "served_models", "server_for",
    "spec_decode_counters", "start", "torn_down", "unsupervised_note", "verify_headless", "verify_running",
]
