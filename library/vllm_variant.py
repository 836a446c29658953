"""A measurement server beside the configured vLLM: the same launch without the drafter, or with another k.

`state: started` starts the configured launch (rendered by vllm_server) with one variation, `variant:
baseline` (no speculative config) or `variant: K` (num_speculative_tokens K, at most the drafter's
block_size - 1), on vllm_port + speed_port_offset, with its own pidfile and log under dfp_root
(dflash_host.speed.variant), and proves it ready like the configured server (log, /health, /v1/models,
smoke). Where memory does not allow a second server, the configured one is stopped first (placement
`instead`, recorded) and `state: stopped` restarts and verifies it afterwards, reporting the downtime;
otherwise the configured server is not touched (same PID). `stopped` stops the measurement server's whole
process tree and removes its records; a start that fails restores the configured server at once.
"""

from __future__ import annotations

from dflash_host.module import Context, main
from dflash_host.vllm import forget_measurement, start_measurement, stop_measurement

ARGS = {
    "state": {"type": "str", "default": "started", "choices": ["started", "stopped", "absent"],
              "help": "started: the measurement server runs the variant, proven ready; stopped: it is gone and the "
              "configured server is back as it was; absent (teardown): it is gone, nothing is restored"},
    "variant": {"type": "raw", "default": "baseline",
                "help": "baseline (no drafter) or K, the num_speculative_tokens to serve (1 .. block_size - 1)"},
    "pidfile": {"include": "vllm_pidfile", "required": True, "help": "the configured server's pidfile: its rendered launch is the one varied"},
    "log": {"type": "path", "required": True, "var": "vllm_log",
            "help": "the configured server's log; the measurement server logs to vllm-speed.log beside it"},
    "root": {"include": "dfp_root", "help": "dfp_root: the measurement server's files lie inside it"},
    "port_offset": {"type": "int", "default": 10, "var": "speed_port_offset",
                    "help": "the measurement server listens on vllm_port + this"},
    "placement": {"type": "str", "default": "auto", "choices": ["auto", "beside", "instead"], "var": "speed_variant_placement",
                  "help": "auto: a second server where GPU memory (or RAM) allows, else instead; beside: always a second "
                  "server; instead: stop the configured server for the measurement and restore it afterwards"},
    "nvidia_smi": {"include": "nvidia_smi", "help": "the nvidia-smi command; none: from PATH"},
    "restore": {"type": "bool", "default": True,
                "help": "stopped: restart the configured server if a measurement stopped it (false: leave it stopped for "
                "the next measurement; a later stopped with restore restarts it)"},
}
# The arguments that decide what runs or which file, folder or address is touched: never built from what a
# host returned when the task runs on the control node (engine/run/trust.py).
CODE_ARGS = ("log", "nvidia_smi", "pidfile", "root")


def run(args: dict, ctx: Context) -> dict:
    if args["state"] == "started":
        return start_measurement(args, ctx)
    if args["state"] == "absent":
        return forget_measurement(args, ctx)
    return stop_measurement(args, ctx)


if __name__ == "__main__":
    main(ARGS, run)
