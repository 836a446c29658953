"""Write the host agent's Prometheus textfile once: GPU memory, whether the tool's server runs, its running k.

The same reading and file as `python3 -m dflash_host.monitor` (dflash_host/monitor/): <textfile_dir>/dflash_host.prom
beside the speed figures' dflash.prom, for node_exporter's textfile collector. A provision or a serving-bench runs it
so the file is fresh right after they change the server; the agent's loop keeps it fresh between runs. changed is
true only when the file's text changed (a second run with nothing new changes nothing); a file there that is not
the tool's is refused, untouched. Read-only otherwise: nvidia-smi (bounded by timeout_s), the pidfile, the launch.
"""

from __future__ import annotations

import os

from dflash_host.host.paths import managed_path
from dflash_host.module import Context, ModuleError, main
from dflash_host.monitor import readings, textfile
from dflash_host.speed.prom_textfile import holds

ARGS = {
    "pidfile": {"include": "vllm_pidfile", "required": True,
                "help": "the server's pidfile: it and its launch say whether the server runs and with which k"},
    "root": {"include": "dfp_root", "help": "dfp_root: the textfile folder's default lies inside it"},
    "textfile_dir": {"type": "path", "default": None, "var": "prometheus_textfile_dir",
                     "help": "node_exporter's --collector.textfile.directory (dflash_host.prom goes there); "
                             "none: <dfp_root>/metrics"},
    "nvidia_smi": {"include": "nvidia_smi"},
    "timeout_s": {"type": "float", "default": 20.0, "help": "seconds nvidia-smi may take to answer"},
}
# The arguments that decide what runs or which file, folder or address is touched: never built from what a
# host returned when the task runs on the control node (engine/run/trust.py).
CODE_ARGS = ("pidfile", "root", "textfile_dir", "nvidia_smi")


def folder_of(args: dict) -> str:
    """The textfile folder: textfile_dir, else <dfp_root>/metrics (as speed_record's), one the tool may write."""
    if not args["textfile_dir"] and not args["root"]:
        raise ModuleError("dfp_root is empty; set it, or set prometheus_textfile_dir")
    folder = args["textfile_dir"] or os.path.join(os.path.expanduser(args["root"]), "metrics")
    return managed_path(folder, "prometheus_textfile_dir")


def run(args: dict, ctx: Context) -> dict:
    folder = folder_of(args)
    reading = readings.read(args["pidfile"], args["nvidia_smi"], args["timeout_s"])
    path = os.path.join(folder, textfile.TEXTFILE_NAME)
    if ctx.check:
        return {"changed": not holds(path, textfile.render(reading)), "textfile": path, "reading": reading,
                "msg": f"would write {path}"}
    path, changed = textfile.write(folder, reading)
    said = f"GPU memory {', '.join(str(g['used_mib']) for g in reading['gpus'])} MiB" if reading["driver_up"] \
        else f"no GPU reading ({reading['gpu_error']})"
    return {"changed": changed, "textfile": path, "reading": reading,
            "msg": f"{path}: {said}; server running: {reading['server_running']}; k: {reading['k']}"}


if __name__ == "__main__":
    main(ARGS, run)
