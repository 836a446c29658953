"""`python3 -m dflash_host.monitor --dfp-root R --textfile-dir D [--pidfile P] [--nvidia-smi PATH] [--every S]`.

Without --every: one reading written, exit 0 (2 with a one-paragraph error: a bad argument, a textfile that is not
the tool's, a folder it cannot write). With --every S: a reading each S seconds, each nvidia-smi call bounded by
min(S, 20) s, until SIGTERM or SIGINT (exit 0); a write that fails is said on stderr and tried again next period, so
a file moved out of the way or a disk freed is picked up without a restart.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time

from dflash_host.host.gpus import DEFAULT_TIMEOUT_S
from dflash_host.host.paths import managed_path
from dflash_host.module import ModuleError
from dflash_host.monitor import readings, textfile


class Stopped(Exception):
    """SIGTERM or SIGINT arrived: the loop ends (atomic_write removes a temp file it was writing)."""


def parse(argv: list) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python3 -m dflash_host.monitor",
                                     description="Write the host's GPU memory, server state and running k as a "
                                                 "Prometheus textfile (dflash_host.prom) for node_exporter.")
    parser.add_argument("--dfp-root", required=True, help="the host's dfp_root")
    parser.add_argument("--textfile-dir", required=True, help="node_exporter's --collector.textfile.directory")
    parser.add_argument("--pidfile", help="the server's pidfile (vllm_pidfile); default DFP_ROOT/run/vllm.pid")
    parser.add_argument("--nvidia-smi", default=None, help="the nvidia-smi command (nvidia_smi); default from PATH")
    parser.add_argument("--every", type=float, default=None, help="seconds between readings; none: one reading")
    args = parser.parse_args(argv)
    if args.every is not None and not 1 <= args.every <= 86400:
        parser.error(f"--every {args.every:g}: give the seconds between readings, from 1 to 86400")
    return args


def places(args: argparse.Namespace) -> tuple:
    """(pidfile, textfile folder), the folder one the tool may write (managed_path's rules)."""
    root = os.path.expanduser(args.dfp_root)
    pidfile = os.path.expanduser(args.pidfile) if args.pidfile else os.path.join(root, "run", "vllm.pid")
    return pidfile, managed_path(os.path.expanduser(args.textfile_dir), "--textfile-dir")


def once(pidfile: str, folder: str, smi: str | None, timeout_s: float, touch: bool) -> list:
    """Read and write once; return what could not be read (nvidia-smi's failure, the server's), to be said."""
    reading = readings.read(pidfile, smi, timeout_s)
    textfile.write(folder, reading, touch=touch)
    return [why for why in (reading["gpu_error"], reading["server_error"]) if why]


def say(lines: list) -> None:
    for line in lines:
        print(f"dflash_host.monitor: {line}", file=sys.stderr, flush=True)


def loop(pidfile: str, folder: str, smi: str | None, every: float) -> None:
    """A reading each `every` seconds until Stopped; a failed write is said and tried again next period. What
    could not be read is said when it changes (not every period: a host without a driver stays quiet)."""
    said: list = []
    while True:
        began = time.monotonic()
        try:
            now = once(pidfile, folder, smi, min(every, DEFAULT_TIMEOUT_S), touch=True)
        except ModuleError as exc:
            now = [exc.msg]
        if now != said:
            say(now)
            said = now
        time.sleep(max(0.0, every - (time.monotonic() - began)))


def stop(signum: int, frame: object) -> None:
    raise Stopped()


def main(argv: list) -> int:
    args = parse(argv)
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        pidfile, folder = places(args)
        if args.every is None:
            say(once(pidfile, folder, args.nvidia_smi, DEFAULT_TIMEOUT_S, touch=False))
        else:
            loop(pidfile, folder, args.nvidia_smi, args.every)
    except ModuleError as exc:
        print(f"dflash_host.monitor: {exc.msg}", file=sys.stderr)
        return 2
    except Stopped:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
