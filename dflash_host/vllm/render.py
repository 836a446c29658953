"""Rendering the vLLM launch: the launch record, the 0600 environment file and the systemd unit, written
only where they differ and only over files the tool provably wrote.

The launch (dflash_host.vllm.launch.resolve) becomes files beside the pidfile: NAME.launch.json (argv,
masked environment, what readiness, smoke and acceptance expect), NAME.env (the environment, secrets
included, mode 0600) and, in systemd mode, the unit. The fingerprint covers argv, environment, model
files, mode and unit: a running server with another fingerprint runs a stale launch. Used by vllm.server.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import TYPE_CHECKING, Any

from dflash_host.host import systemd
from dflash_host.host.files import atomic_write, read_bytes
from dflash_host.host.paths import managed_path
from dflash_host.models.config import looks_like_path
from dflash_host.module import ModuleError
from dflash_host.vllm.cluster import refuse_node, wants_cluster
from dflash_host.vllm.launch import located, masked_env
from dflash_host.vllm.log import check_log
from dflash_host.vllm.records import dump, is_tool_file, read_launch, remove_tool_file, render_env_file
from dflash_host.vllm.smoke_checks import burst_size
from dflash_host.vllm.systemd_unit import render_unit

if TYPE_CHECKING:  # annotations only
    from dflash_host.module import Context


def fingerprint(argv: list, env_text: str, models: dict, mode: str, unit_text: str | None) -> str:
    """What decides whether a running server is the wanted one; secrets enter only as a hash."""
    blob = json.dumps(
        {
            "argv": argv,
            "env": hashlib.sha256(env_text.encode()).hexdigest(),
            "models": models,
            "mode": mode,
            "unit": unit_text,
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()


def check_places(p: dict, log: str | None, root: str | None) -> str | None:
    """The normalised root once the pidfile (the launch files sit beside it) and the log are the tool's places."""
    managed_path(p["pidfile"], "vllm_pidfile", root)
    if log is not None:
        check_log(log, root)
    return os.path.normpath(os.path.expanduser(root)) if root else None


def refuse_foreign_targets(targets: dict) -> None:
    """Render overwrites only its own files: a file of another kind at a target path stops it, unchanged."""
    for path, kind in targets.items():
        if path and os.path.lexists(path) and not is_tool_file(path, kind):
            proof = "the tool's header line" if kind in ("env", "unit") else "the fields of the tool's record"
            what = "vllm_service_name (or vllm_unit_dir)" if kind == "unit" else "vllm_pidfile"
            raise ModuleError(
                f"{path} exists but was not written by dflash-provision (it lacks {proof}); it was left untouched "
                f"and nothing was rendered. Move it away, or choose another {what}",
                path=path,
            )


def refuse_leaving_cluster(p: dict, args: dict) -> None:
    """A node of a serving cluster keeps its cluster launch: a render without cluster settings (vllm-service:
    provision, restart-server, rebuild) would restart it alone as a one-host server. The other way is allowed."""
    if not wants_cluster(args):
        refuse_node(p, args.get("inventory_name"))


def check_settings(args: dict, ctx: Context) -> None:
    """The settings resolve does not look at: the log, readiness, smoke and acceptance, the environment's python."""
    if not args.get("log"):
        raise ModuleError("vllm_log is empty; set the path of the server's log file")
    if args["log_keep"] < 0:
        raise ModuleError(f"log_keep is {args['log_keep']}; it must be 0 or more rotated logs")
    if args["readiness_timeout_s"] <= 0:
        raise ModuleError(f"readiness_timeout_s is {args['readiness_timeout_s']}; it must be more than 0 seconds")
    rate = args.get("min_acceptance_rate")
    if rate is not None and not 0 <= rate <= 1:
        raise ModuleError(f"min_acceptance_rate is {rate}; it must be a fraction from 0 to 1 (e.g. 0.3)")
    if args["smoke_requests"] < 1 or args["smoke_max_tokens"] < 1:
        raise ModuleError("smoke_requests and smoke_max_tokens must be at least 1")
    venv_python = args.get("venv_python")
    if venv_python and not ctx.check and not os.path.exists(venv_python):
        raise ModuleError(
            f"venv_python {venv_python} does not exist; the venv role builds the serving environment "
            "(run provision, or fix venv_python)"
        )


def models_to_come(args: dict) -> str | None:
    """Check mode: a model folder an earlier role would create does not exist yet (what to say), else None."""
    for var in ("target_model", "drafter_model"):
        value = args.get(var)
        if value and looks_like_path(value) and not os.path.exists(os.path.expanduser(value)):
            return f"would render the vLLM launch once {var} {value} exists (an earlier role creates it)"
        if value and not looks_like_path(value) and located(args, var) == value:
            return f"would render the vLLM launch once the models role has fetched {var} {value}"
    return None


def launch_record(args: dict, spec: dict, p: dict, mode: str, root: str | None) -> tuple:
    """(launch record, environment file text, unit text or None) of a resolved launch."""
    env_text = render_env_file(spec["env"])
    unit_path = os.path.join(args["unit_dir"], f"{args['service_name']}.service") if mode == "systemd" else None
    log = os.path.abspath(args["log"])
    workdir = os.path.dirname(p["pidfile"])
    # The unit names the launch by a digest of what it runs, so it is stable across identical renders.
    pre = fingerprint(spec["argv"], env_text, spec["models"], mode, None)
    unit_text = (
        render_unit(spec["argv"], p["env"], log, pre[:12], "vLLM server with a DFlash drafter", workdir)
        if unit_path
        else None
    )
    fp = fingerprint(spec["argv"], env_text, spec["models"], mode, unit_text)
    launch = {
        "fingerprint": fp,
        "launch_id": fp[:12],
        "mode": mode,
        "argv": spec["argv"],
        "argv_parts": spec["argv_parts"],
        "values": spec["values"],
        "env": masked_env(spec["env"]),
        "env_file": p["env"],
        "api_key_set": "VLLM_API_KEY" in spec["env"],
        "log": log,
        "log_keep": args["log_keep"],
        "root": root,
        "workdir": workdir,
        "host": spec["host"],
        "port": spec["port"],
        "served_model_name": spec["served_model_name"],
        "speculative": spec["speculative"],
        "expected_architectures": spec["expected_architectures"],
        "models": spec["models"],
        "readiness_timeout_s": args["readiness_timeout_s"],
        "stop_grace_s": args["stop_grace_s"],
        "smoke": {"prompt": args["smoke_prompt"], "requests": args["smoke_requests"], "max_tokens": args["smoke_max_tokens"],
                  "burst": burst_size(args.get("smoke_burst"), spec["values"].get("max_num_seqs"), spec["flavor"])},
        "acceptance": {"min_rate": args.get("min_acceptance_rate"), "gate": args["acceptance_gate"]},
        "service_name": args["service_name"],
        "unit_path": unit_path,
    }
    if spec.get("cluster"):  # a node of a multi-node vLLM (a single host's record stays as it was)
        # its inventory group too, so that advice given later (another play, another run) can name it
        launch["cluster"] = dict(spec["cluster"], group=args.get("cluster_group"))
    return launch, env_text, unit_text


def files_wanted(p: dict, launch: dict, env_text: str, unit_text: str | None) -> dict:
    """{path: bytes} of every file the launch is made of."""
    want = {p["launch"]: dump(launch), p["env"]: env_text.encode()}
    if launch["unit_path"] and unit_text is not None:
        want[launch["unit_path"]] = unit_text.encode()
    return want


def write_launch(p: dict, launch: dict, want: dict) -> bool:
    """Write the environment file, the launch and the unit (reloading systemd when the unit changed);
    True when systemd was reloaded."""
    unit_path = launch["unit_path"]
    old_unit = read_bytes(unit_path) if unit_path else None
    os.makedirs(os.path.dirname(p["launch"]), exist_ok=True)
    atomic_write(p["env"], want[p["env"]], mode=0o600)
    atomic_write(p["launch"], want[p["launch"]], mode=0o600)
    remove_tool_file(p["torndown"], "torndown", False)  # provisioned again: the teardown record is history
    if unit_path and old_unit != want[unit_path]:
        atomic_write(unit_path, want[unit_path], mode=0o644)
        systemd.systemctl(["daemon-reload"])
        systemd.unit_command("enable", launch["service_name"])
        return True
    return False


def launch_diff(old: dict | None, launch: dict, spec: dict) -> dict:
    """What changed, for --diff: argv, the (masked) environment and the mode; the model files when they moved."""
    old = old or {}
    before: dict[str, Any] = {"argv": old.get("argv"), "env": old.get("env"), "mode": old.get("mode")}
    after: dict[str, Any] = {"argv": spec["argv"], "env": launch["env"], "mode": launch["mode"]}
    if old and old.get("models") != spec["models"]:
        before["models"], after["models"] = old.get("models"), spec["models"]
    return {"before": before, "after": after}


def render_files(p: dict, launch: dict, spec: dict, want: dict, ctx: Context) -> dict:
    """Write what differs (nothing in check mode): the module's result."""
    old = read_launch(p["launch"])
    differs = [path for path, data in want.items() if read_bytes(path) != data]
    env_mode_ok = read_bytes(p["env"]) is None or (os.stat(p["env"]).st_mode & 0o777) == 0o600
    result = {
        "changed": bool(differs) or not env_mode_ok,
        "fingerprint": launch["fingerprint"],
        "mode": launch["mode"],
        "argv": spec["argv"],
        "launch_file": p["launch"],
        "unit_path": launch["unit_path"],
        "expected_architectures": spec["expected_architectures"],
    }
    if launch.get("cluster"):
        result["cluster"] = launch["cluster"]
    if spec.get("runner_env"):  # set by the launch for the drafter (vllm.runner): said, since vllm_env lacks it
        result["runner_env"] = spec["runner_env"]
    if not result["changed"]:
        where = f"on port {spec['port']}" if spec["port"] is not None else "as a headless node"
        result["msg"] = f"launch for {spec['served_model_name']} {where} is as rendered ({launch['mode']} mode)"
        return result
    if not ctx.check and write_launch(p, launch, want):
        result["daemon_reload"] = True
    result["diff"] = launch_diff(old, launch, spec)
    what = ", ".join(sorted(os.path.basename(x) for x in differs)) or "environment file mode"
    result["msg"] = f"{'would write' if ctx.check else 'wrote'} the vLLM launch ({what}; {launch['mode']} mode)"
    return result
