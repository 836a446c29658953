"""One node of a multi-node vLLM (vLLM's own launcher): does it run the rendered launch, and is its part there?

`probe` says whether this node runs the rendered launch (`current`: the same fingerprint test vllm_server's
started uses), with its PID, rank and role: the role restarts the cluster's nodes together when one is not
current. `verify` checks a running node by what runs on it, since the head answers /health 200 even after a
worker node died: its local workers (VLLM::Worker* descendants of the pidfile's process) number the local world
size ((TP x PP) / nnodes), each worker of a worker node holds an ESTABLISHED TCP connection to the head's
master_addr:master_port, and the head also answers /health 200. A node that falls short fails in one
paragraph naming its rank and what is missing, quoting its log's first exception when there is one. Verify
records the workers it found in the pidfile's tree (so a later stop finds them even if their parent died);
nothing else is changed, and nothing at all in check mode, where a node that does not run the launch the play
renders yet (new, stopped, or about to restart) is not verified but reported as `would verify`, and a problem
found on a running one is a warning (the run may restart the whole cluster first, which one node cannot know).
"""

from __future__ import annotations

from dflash_host.module import Context, main
from dflash_host.vllm import probe_node, refuse_one_host, verify_node

ARGS = {
    "action": {"type": "str", "required": True, "choices": ["probe", "verify", "one_host"],
               "help": "probe: does this node run the rendered launch (current); verify: its workers and their link to "
               "the head; one_host: refuse a one-host playbook (provision, restart-server, rebuild) on a cluster node, "
               "before it stops or builds anything"},
    "pidfile": {"include": "vllm_pidfile", "required": True, "help": "the node's pidfile (vllm_server's); the launch files sit beside it"},
    "fingerprint": {"type": "str", "default": None,
                    "help": "probe, and verify in check mode: the launch wanted (the render task's; in check mode it "
                    "may differ from the file)"},
    "nvidia_smi": {"include": "nvidia_smi", "help": "the nvidia-smi command (verify lists the node's processes holding a GPU); none: from PATH"},
    "timeout_s": {"type": "float", "default": 2.0, "help": "verify: seconds for the head's /health probe"},
    "inventory_name": {"type": "str", "default": None, "var": "inventory_hostname",
                       "help": "one_host: this host's inventory name (named in the refusal)"},
    "wait_s": {"type": "float", "default": 0,
               "help": "verify: keep looking this long for the node's workers to be up and connected (0: one look)"},
}
# The arguments that decide what runs or which file, folder or address is touched: never built from what a
# host returned when the task runs on the control node (engine/run/trust.py).
CODE_ARGS = ("pidfile", "nvidia_smi")


def run(args: dict, ctx: Context) -> dict:
    if args["action"] == "probe":
        return probe_node(args)
    if args["action"] == "one_host":
        return refuse_one_host(args)
    return verify_node(args, ctx)


if __name__ == "__main__":
    main(ARGS, run)
