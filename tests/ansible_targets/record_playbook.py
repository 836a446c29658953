#!/usr/bin/env python3
"""The `ansible-playbook` a target's scripts find first on PATH: runs real ansible-playbook or this project's
engine (DFP_TARGET_TOOL), passes its output through unchanged and keeps a copy of it in DFP_TARGET_LOGS for the
count."""

import os
import subprocess
import sys
import threading
from pathlib import Path


def command() -> list[str]:
    bin_dir = Path(sys.executable).parent
    if os.environ["DFP_TARGET_TOOL"] == "ours":
        return [sys.executable, "-m", "tests.ansible_targets.ours_playbook"]
    return [str(bin_dir / "ansible-playbook")]


def tee(source, sink, keep) -> None:
    for chunk in iter(lambda: source.read1(65536), b""):
        sink.write(chunk)
        sink.flush()
        keep.write(chunk)


def main() -> int:
    logs = Path(os.environ["DFP_TARGET_LOGS"])
    number = len(list(logs.glob("*.log"))) + 1
    with open(logs / f"{number:03d}.log", "wb") as out, open(logs / f"{number:03d}.err", "wb") as err:
        out.write(("$ ansible-playbook " + " ".join(sys.argv[1:]) + "\n").encode())
        proc = subprocess.Popen(command() + sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        errors = threading.Thread(target=tee, args=(proc.stderr, sys.stderr.buffer, err))
        errors.start()
        tee(proc.stdout, sys.stdout.buffer, out)
        errors.join()
        return proc.wait()


if __name__ == "__main__":
    sys.exit(main())
