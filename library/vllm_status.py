"""Report the managed vLLM server's state for `invoke status`: read-only, changes nothing.

Running or not (pidfile proven by PID + start time + command line, or the systemd unit), PID, port,
uptime, /health, the served model, the acceptance rate and mean acceptance length since the server
started (from /metrics), and the GPU memory its processes hold (nvidia-smi; null without a driver).
A node of a multi-node vLLM also reports its rank, role and local workers; a headless worker node (no HTTP)
is judged by them instead: `health` is "ok" when all its local workers run, each connected to the head.
A server that dies while it is being read is reported as not running (the probes are a snapshot; the
process is looked at again after them). A log deleted under a running server is reported (log_present
false) with the descriptor through which the server still writes it (log_open_fd, /proc/PID/fd/N).
A host torn down (no launch, teardown's NAME.torndown.json beside the pidfile) is provisioned and not running;
one with neither was never provisioned (`provisioned` false: `invoke status` exits 4 for it, 3 for the other).
"""

from __future__ import annotations

from dflash_host.module import Context, main
from dflash_host.speed.state import last_speed, state_file_for
from dflash_host.vllm import status

ARGS = {
    "pidfile": {"include": "vllm_pidfile", "required": True, "help": "the server's pidfile; the launch files sit beside it"},
    "nvidia_smi": {"include": "nvidia_smi"},
    "timeout_s": {"type": "float", "default": 2.0, "help": "seconds per HTTP probe"},
    "root": {"include": "dfp_root", "help": "dfp_root: the state file lies inside it"},
    "state_file": {"type": "path", "default": None, "var": "speed_state_file",
                   "help": "the host's speed record; none: <dfp_root>/state/speed.json"},
}
# The arguments that decide what runs or which file, folder or address is touched: never built from what a
# host returned when the task runs on the control node (engine/run/trust.py).
CODE_ARGS = ("pidfile", "root", "state_file", "nvidia_smi")


def speed_record(args: dict) -> dict:
    """The last speed figures serving-bench, tune or the speed gate recorded here ({} when none)."""
    path = state_file_for(args["root"], args["state_file"])
    return last_speed(path) if path else {}


def run(args: dict, ctx: Context) -> dict:
    out = status(args)
    out["speed"] = speed_record(args)
    return out


if __name__ == "__main__":
    main(ARGS, run)
