"""Invoke entry points: `invoke provision --host gpu1`, restart-server, teardown, rebuild, status, ...

The collection is built explicitly from one option table (dfp_cli/options.py); each command turns its flags
into one engine call (dfp_cli/commands.py). The engine is imported inside the commands so `invoke --list`
and a no-change run start fast.
"""

from __future__ import annotations

from invoke import Collection, Task

from dfp_cli import commands as cmd
from dfp_cli import speed_commands as speed
from dfp_cli.monitoring.command import monitoring
from dfp_cli.options import INVENTORY_OPTIONS, MONITORING_OPTIONS, PLAYBOOK_OPTIONS, REPORT_OPTIONS, Option, invoke_task

PURGE = Option("purge", False, "also remove environments and generated configs (logs and fetched models are kept)", ("p",))
PURGE_MODELS = Option("purge_models", False, "also remove the model repositories the tool fetched from the Hub")

ns = Collection(
    invoke_task(cmd.playbook_command("provision"), PLAYBOOK_OPTIONS, "provision",
                "Bring hosts to a healthy vLLM + DFlash server, verified down to the acceptance rate."),
    invoke_task(cmd.playbook_command("restart-server"), PLAYBOOK_OPTIONS, "restart-server",
                "Stop the server (whole process tree), free the GPU, start it again and verify it."),
    invoke_task(cmd.playbook_command("rebuild"), PLAYBOOK_OPTIONS, "rebuild",
                "Nightly: fresh environment beside the current one, restart and verify the server on it, then switch; "
                "roll back on failure."),
    invoke_task(cmd.playbook_command("serving-cluster"), PLAYBOOK_OPTIONS, "serving-cluster",
                "One model served by a group of hosts (vLLM's multi-node launcher): --group cluster."),
    invoke_task(cmd.teardown, (*PLAYBOOK_OPTIONS, PURGE, PURGE_MODELS), "teardown",
                "Stop the server and free the GPU; --purge also removes environments and generated configs."),
    invoke_task(cmd.play, PLAYBOOK_OPTIONS, "play", "Run any playbook (a path, or a name in playbooks/).",
                positional=("playbook",)),
    invoke_task(cmd.report_command("status"), REPORT_OPTIONS, "status",
                "Is the server running and healthy, what it serves, its acceptance rate and GPU memory; with --group "
                "or -l one line per host (k, verdict per load, alerts firing from prometheus_url)."),
    invoke_task(cmd.report_command("facts"), REPORT_OPTIONS, "facts",
                "Gather and print facts (OS, python, CPUs, memory, disk, systemd, GPUs)."),
    invoke_task(speed.serving_bench, speed.SERVING_BENCH_OPTIONS, "serving-bench",
                "Closed-loop load against the server (vllm bench serve); --compare-baseline also without the drafter."),
    invoke_task(speed.tune, speed.TUNE_OPTIONS, "tune",
                "Measure the baseline and each k, choose num_speculative_tokens, write it to host_vars."),
    invoke_task(monitoring, MONITORING_OPTIONS, "monitoring",
                "Prometheus scrape config (file_sd targets) and alert rules for the hosts, from the inventory and each "
                "host's last speed record."),
    invoke_task(cmd.inventory, INVENTORY_OPTIONS, "inventory", "Print the inventory as JSON, like ansible-inventory."),
    Task(cmd.disconnect, name="disconnect"),
    Task(cmd.bench, name="bench", help={"quick": "a short run (under 2 minutes): fewer repetitions, no cold provision"}),
    Task(cmd.module_docs, name="module-docs"),
    Task(cmd.lock, name="lock"),
    Task(cmd.test, name="test", help={"k": "only tests matching this expression", "fast": "skip slow and end-to-end tests"}),
)
