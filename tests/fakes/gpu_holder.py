#!/usr/bin/env python3
"""A test program that "holds" GPU memory, for the stand-in nvidia-smi (tests/fakes/nvidia-smi).

    gpu_holder.py --registry REG --ready DIR NODE_JSON

NODE_JSON describes this process and, recursively, the processes it starts:
    {"name": "top",             ready file DIR/<name>.json ({"pid": ...}) once set up
     "mib": 0, "gpu": 0,        registers itself in REG/holders/<pid>.json when mib > 0
     "hidden": false,           counted as used memory but not listed by --query-compute-apps
     "device": false,           keeps REG/dev/nvidia<gpu> open (for the /proc/*/fd scan)
     "ignore_term": false,      SIGTERM ignored (only SIGKILL stops it)
     "children": [NODE, ...],   started as children in this process group
     "detach": false}           (on a child) started by a double fork: the grandchild calls
                                setsid(), leaving the group, and the intermediate process exits once
                                DIR/release exists, orphaning it; the test records the pidfile tree
                                before creating DIR/release.
Every process then sleeps until it is signalled. Standard library only; runs as any user (the
registry folders are made world-writable by the test).
"""

import json
import os
import signal
import subprocess
import sys
import time


def start_ticks(pid="self"):
    with open("/proc/%s/stat" % pid) as fh:
        data = fh.read()
    return int(data[data.rfind(")") + 2 :].split()[19])


def write_json(path, data):
    tmp = "%s.%d.tmp" % (path, os.getpid())
    with open(tmp, "w") as fh:
        json.dump(data, fh)
    os.replace(tmp, path)


def spawn(registry, ready, node):
    return subprocess.Popen([sys.executable, os.path.abspath(__file__), "--registry", registry, "--ready", ready,
                             json.dumps(node)], close_fds=True)


def detach(registry, ready, node):
    """Double fork: intermediate -> grandchild in a new session; intermediate exits on DIR/release."""
    pid = os.fork()
    if pid:
        return
    grandchild = os.fork()
    if grandchild == 0:
        os.setsid()
        node = dict(node, detach=False)
        argv = [sys.executable, os.path.abspath(__file__), "--registry", registry, "--ready", ready, json.dumps(node)]
        os.execv(sys.executable, argv)
    release = os.path.join(ready, "release")
    while not os.path.exists(release):
        time.sleep(0.02)
    os._exit(0)


def main(argv):
    registry = argv[argv.index("--registry") + 1]
    ready = argv[argv.index("--ready") + 1]
    node = json.loads(argv[-1])
    signal.signal(signal.SIGTERM, signal.SIG_IGN if node.get("ignore_term") else signal.SIG_DFL)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children that exit are reaped at once
    fds = []
    if node.get("device"):
        folder = os.path.join(registry, "dev")
        os.makedirs(folder, exist_ok=True)
        fds.append(os.open(os.path.join(folder, "nvidia%d" % node.get("gpu", 0)), os.O_RDONLY | os.O_CREAT, 0o666))
    if node.get("mib", 0) > 0:
        entry = {
            "pid": os.getpid(),
            "start_ticks": start_ticks(),
            "mib": int(node["mib"]),
            "gpu": int(node.get("gpu", 0)),
            "hidden": bool(node.get("hidden")),
        }
        write_json(os.path.join(registry, "holders", "%d.json" % os.getpid()), entry)
    for child in node.get("children", []):
        if child.get("detach"):
            detach(registry, ready, child)
        else:
            spawn(registry, ready, child)
    write_json(os.path.join(ready, "%s.json" % node["name"]), {"pid": os.getpid(), "pgid": os.getpgrp()})
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main(sys.argv[1:])
