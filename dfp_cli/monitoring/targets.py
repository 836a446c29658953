"""The Prometheus scrape configuration and its file_sd target files.

Jobs: `vllm` (the server's /metrics), `vllm-health` (its /health: vLLM answers 200 with an empty body, a valid
exposition of no samples, when its engine is ready and 503 otherwise, so that job's `up` says "ready"), `node`
(node_exporter, whose textfile collector reads the tool's dflash.prom) and, for hosts with a GPU exporter
(gpu_exporter_port), `gpu`. Every target carries the host's labels (HostView.labels); the target files are
re-read by Prometheus when they change, so a re-run of the command needs no reload for new hosts.
"""

from __future__ import annotations

from dfp_cli.monitoring.hosts import HostView

RULES_FILE = "rules/dflash.rules.yml"
TARGET_FILES = {"vllm": "targets/vllm.yml", "node": "targets/node.yml", "gpu": "targets/gpu.yml"}
SCRAPE_INTERVAL = "15s"


def target_groups(views: list[HostView], job: str) -> list[dict]:
    """file_sd's format: one {targets, labels} group per host."""
    out = []
    for view in views:
        port = {"vllm": view.vllm_port if view.serves_http else None, "node": view.node_exporter_port,
                "gpu": view.gpu_exporter_port}[job]
        if port:
            out.append({"targets": [f"{_host_part(view.address)}:{port}"], "labels": view.labels()})
    return out


def _host_part(address: str) -> str:
    """An IPv6 address goes in brackets before its port."""
    return f"[{address}]" if ":" in address and not address.startswith("[") else address


def _job(name: str, target_file: str, metrics_path: str = "/metrics") -> dict:
    return {"job_name": name, "metrics_path": metrics_path, "file_sd_configs": [{"files": [target_file]}]}


def scrape_config(views: list[HostView], every: str = SCRAPE_INTERVAL) -> dict:
    """prometheus.yml: the rule file and one job per kind of target (paths relative to the file itself); `every`
    (monitoring_scrape_interval) is how often it scrapes and evaluates the rules."""
    jobs = [_job("vllm", TARGET_FILES["vllm"]), _job("vllm-health", TARGET_FILES["vllm"], "/health"),
            _job("node", TARGET_FILES["node"])]
    if any(v.gpu_exporter_port for v in views):
        jobs.append(_job("gpu", TARGET_FILES["gpu"]))
    return {"global": {"scrape_interval": every, "evaluation_interval": every},
            "rule_files": [RULES_FILE], "scrape_configs": jobs}


def target_files(views: list[HostView]) -> dict[str, list[dict]]:
    """{relative path: file_sd groups}; the gpu file only where some host has a GPU exporter."""
    return {path: target_groups(views, job) for job, path in TARGET_FILES.items()
            if job != "gpu" or any(v.gpu_exporter_port for v in views)}
