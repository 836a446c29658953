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
     "cuda_gib": 0,             allocates this much real GPU memory with torch (tools/gpu/ only)
     "detach": false}           (on a child) started by a double fork: the grandchild calls
                                setsid(), leaving the group, and the intermediate process exits once
                                DIR/release exists, orphaning it; the test records the pidfile tree
                                before creating DIR/release.
Every process then sleeps until it is signalled. Standard library only; runs as any user (the
registry folders are made world-writable by the test).

Imported by tests, `FakeGpu` sets up a stand-in nvidia-smi with its registry in a folder every user
can reach and starts holder trees (optionally as another user) and stops them again by PID.
"""

import json
import os
import signal
import subprocess
import sys
import time


def start_ticks(pid="self"):
    with open(f"/proc/{pid}/stat") as fh:
        data = fh.read()
    return int(data[data.rfind(")") + 2 :].split()[19])


def write_json(path, data):
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as fh:
        json.dump(data, fh)
    os.replace(tmp, path)


def spawn(registry, ready, node):
    return subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "--registry", registry, "--ready", ready, json.dumps(node)], close_fds=True
    )


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
    parent = os.getppid()
    # Exit on release, and also when the test's folder is gone or the parent died (test cleanup).
    while not os.path.exists(release) and os.path.isdir(ready) and os.getppid() == parent:
        time.sleep(0.02)
    os._exit(0)


def cuda_hold(node):
    """Allocate and touch real GPU memory with torch (GPU verification runs only)."""
    gib = float(node.get("cuda_gib") or 0)
    if gib <= 0:
        return None
    import torch

    block = torch.empty(int(gib * 2**30), dtype=torch.uint8, device=f"cuda:{int(node.get('gpu', 0))}")
    block.fill_(7)
    torch.cuda.synchronize()
    return block


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
        fds.append(os.open(os.path.join(folder, f"nvidia{node.get('gpu', 0)}"), os.O_RDONLY | os.O_CREAT, 0o666))
    if node.get("mib", 0) > 0:
        entry = {
            "pid": os.getpid(),
            "start_ticks": start_ticks(),
            "mib": int(node["mib"]),
            "gpu": int(node.get("gpu", 0)),
            "hidden": bool(node.get("hidden")),
        }
        write_json(os.path.join(registry, "holders", f"{os.getpid()}.json"), entry)
    for child in node.get("children", []):
        if child.get("detach"):
            detach(registry, ready, child)
        else:
            spawn(registry, ready, child)
    _held = cuda_hold(node)  # after forking: a forked child must not inherit a CUDA context
    write_json(os.path.join(ready, f"{node['name']}.json"), {"pid": os.getpid(), "pgid": os.getpgrp()})
    while True:
        time.sleep(3600)


# ---------------------------------------------------------------- test-side helper (imported by tests)

HERE = os.path.dirname(os.path.abspath(__file__))
SYSTEM_PYTHON = "/usr/bin/python3"


def node_names(node):
    yield node["name"]
    for child in node.get("children", []):
        yield from node_names(child)


class Tree:
    """A started holder tree: `pids[name]`, `procs[name]` (psutil.Process), and the Popen of the top."""

    def __init__(self, popen, procs):
        self.popen = popen
        self.procs = procs
        self.pids = {name: p.pid for name, p in procs.items()}


class FakeGpu:
    """A stand-in nvidia-smi in ROOT/bin with its registry beside it, and the holders started on it."""

    def __init__(self, root=None, gpus=None, driver=True, extra=None):
        import shutil
        import tempfile

        self.root = root or tempfile.mkdtemp(prefix="dfp-gpu-", dir="/tmp")
        os.chmod(self.root, 0o755)
        self.bin = os.path.join(self.root, "bin")
        self.registry = os.path.join(self.bin, "nvidia-smi.d")
        self.ready = os.path.join(self.root, "ready")
        for d in (
            self.bin,
            self.registry,
            os.path.join(self.registry, "holders"),
            os.path.join(self.registry, "dev"),
            self.ready,
        ):
            os.makedirs(d, exist_ok=True)
        for d in (os.path.join(self.registry, "holders"), os.path.join(self.registry, "dev"), self.ready):
            os.chmod(d, 0o1777)
        self.nvidia_smi = os.path.join(self.bin, "nvidia-smi")
        shutil.copy(os.path.join(HERE, "nvidia-smi"), self.nvidia_smi)
        os.chmod(self.nvidia_smi, 0o755)
        self.holder = os.path.join(self.bin, "gpu_holder.py")
        shutil.copy(os.path.abspath(__file__), self.holder)
        os.chmod(self.holder, 0o755)
        self.device_prefix = os.path.join(self.registry, "dev", "nvidia")
        self.configure(gpus=gpus, driver=driver, extra=extra)
        self.trees = []

    def configure(self, gpus=None, driver=True, extra=None):
        cfg = {"driver": driver}
        if gpus is not None:
            cfg["gpus"] = gpus
        cfg.update(extra or {})
        write_json(os.path.join(self.registry, "gpus.json"), cfg)
        os.chmod(os.path.join(self.registry, "gpus.json"), 0o644)

    def start(self, node, user=None, new_session=True, python=None, timeout=15.0):
        """Start a holder tree (as `user` if given: needs root) and wait until every node is ready."""
        import psutil

        names = list(node_names(node))
        for name in names:
            path = os.path.join(self.ready, name + ".json")
            if os.path.exists(path):
                os.unlink(path)
        exe = python or (SYSTEM_PYTHON if user else sys.executable)
        argv = [exe, self.holder, "--registry", self.registry, "--ready", self.ready, json.dumps(node)]
        env = dict(os.environ, HOME="/tmp") if user else None  # another user cannot use root's HOME
        popen = subprocess.Popen(argv, start_new_session=new_session, user=user, cwd="/", stdin=subprocess.DEVNULL, env=env)
        deadline = time.monotonic() + timeout
        procs = {}
        while len(procs) < len(names):
            if time.monotonic() > deadline:
                self.trees.append(Tree(popen, procs))
                raise RuntimeError(f"holder tree did not get ready: {sorted(procs)} of {names}")
            for name in names:
                path = os.path.join(self.ready, name + ".json")
                if name not in procs and os.path.exists(path):
                    with open(path) as fh:
                        procs[name] = psutil.Process(json.load(fh)["pid"])
            time.sleep(0.01)
        tree = Tree(popen, procs)
        self.trees.append(tree)
        return tree

    def release(self):
        """Let detached nodes' intermediate processes exit (orphaning the detached holders)."""
        with open(os.path.join(self.ready, "release"), "w"):
            pass

    def smi(self, *args):
        return subprocess.run(
            [self.nvidia_smi, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False
        ).stdout.decode()

    def used_mib(self, index=0):
        out = self.smi("--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", str(index))
        return int(out.strip())

    def stop_all(self):
        """SIGKILL every process this helper started (by PID with psutil's reuse check), reap the tops."""
        import psutil

        self.release()
        for tree in self.trees:
            for proc in tree.procs.values():
                try:
                    proc.kill()
                except psutil.Error:
                    pass
            try:
                tree.popen.kill()
            except OSError:
                pass
            try:
                tree.popen.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        self.trees = []

    def cleanup(self):
        import shutil

        self.stop_all()
        shutil.rmtree(self.root, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:])


# A process tree shaped like a vLLM server: a top process that ignores SIGTERM, a worker with a
# grandchild in the same group, and a child that double-forked out of the group (recorded in the pidfile).
SERVER_TREE = {
    "name": "top",
    "ignore_term": True,
    "children": [
        {"name": "worker", "mib": 2048, "children": [{"name": "grandchild", "mib": 512}]},
        {"name": "detached", "mib": 1024, "detach": True},
    ],
}
