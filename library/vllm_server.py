"""The managed vLLM server with a DFlash drafter: rendered, running, proven healthy, or stopped.

`state: rendered` validates the role's variables and writes the launch (argv, a 0600 environment
file holding the secrets, a systemd unit where systemd runs) beside the pidfile; it is `changed`
only when that launch differs. `started` makes sure a server runs with exactly that launch: a
running one with the same fingerprint (argv + environment + model files) is checked (health,
served name, a smoke completion, acceptance) and left alone; otherwise the old one is stopped (whole
process tree), the log rotated, a new one started in its own session (or through systemd) and
watched until ready, failing within about a second when the process dies or logs a fatal line,
quoting the first exception. `restarted` always restarts (or, with only_if_stale, only when the
running server is not the rendered launch: the role's handler uses that, so a change restarts once).
`stopped` stops the whole tree; `absent` also removes the unit, pidfile and launch files (logs stay).

Only what is provably the tool's is rotated, overwritten or removed: the log and the launch files lie
inside `root` (dfp_root), the live log starts with the tool's start marker, rotated logs carry it too,
launch files have the tool's shape or header, the unit is named after service_name and carries the
tool's header. Anything else is left alone and named in the result (`foreign`).

| argument | type | default | meaning |
|---|---|---|---|
| state | str | started | rendered, started, restarted, stopped, absent |
| pidfile | path | required | the server's pidfile; the launch files sit beside it (NAME.launch.json, NAME.env) |
| root | path | none | dfp_root: pidfile, launch files and log must lie inside it (rendered records it for later states) |
| venv_python | path | none | the serving environment's python (rendered) |
| target_model | str | none | target model folder or hub id (rendered) |
| drafter_model | path | none | DFlash drafter folder; null serves without speculative decoding |
| served_model_name | str | target | the name /v1/models must list |
| host / port | str / int | 127.0.0.1 / 8000 | where vLLM listens |
| flavor | str | cuda | cuda or cpu (cpu implies float32, max-model-len 512, eager, the CPU env) |
| num_speculative_tokens | int | none | drafted tokens per step (required with a drafter) |
| speculative_method | str | dflash | the speculative-config method |
| draft_attention_backend | str | none | speculative-config attention_backend |
| max_model_len, max_num_batched_tokens, tensor_parallel_size | int | none | vLLM flags (null: vLLM's default) |
| gpu_memory_utilization | float | none | fraction of GPU memory for vLLM |
| dtype | str | none | vLLM --dtype (null: flavor default) |
| enforce_eager | bool | none | --enforce-eager (null: flavor default) |
| language_model_only | raw | auto | --language-model-only; auto: when the target config is multimodal |
| extra_args | list | [] | more vLLM flags, long form (--name value) |
| env | dict | {} | more environment variables |
| api_key / api_key_file | str / path | none | VLLM_API_KEY, kept in the 0600 environment file |
| hf_token / hf_token_file | str / path | none | HF_TOKEN, same |
| cache_root | path | none | VLLM_CACHE_ROOT (and inductor/triton caches) on persistent disk |
| log | path | required for rendered | the server's log file |
| log_keep | int | 5 | rotated logs kept |
| readiness_timeout_s | float | 300 | budget from launch to ready |
| stop_grace_s | float | 30 | SIGTERM to SIGKILL |
| smoke_prompt | str | (a sentence) | prompt of the smoke completions |
| smoke_requests | int | 3 | completions sent so drafts happen |
| smoke_max_tokens | int | 32 | tokens per smoke completion |
| min_acceptance_rate | float | none | below it: a warning, or a failure with acceptance_gate fail |
| acceptance_gate | str | warn | warn or fail |
| use_systemd | raw | auto | auto, true, false |
| systemd_present | bool | false | facts.systemd (systemd is PID 1) |
| service_name | str | dflash-vllm | the unit's name |
| unit_dir | path | /etc/systemd/system | where the unit is written |
| expected_architecture | str | none | `Resolved architecture:` of the target (null: from its config.json) |
| fingerprint | str | none | started/restarted: the launch wanted (the rendered one; in check mode it may differ from the file) |
| restart_stale | bool | true | started: restart a running server whose launch differs |
| only_if_stale | bool | false | restarted: restart only when the running server differs from the launch |
"""

from __future__ import annotations

import os
import time

import psutil
import tenacity

from dflash_host import proc as _proc
from dflash_host import vllm_launch as L
from dflash_host import vllm_log as VL
from dflash_host import vllm_metrics as M
from dflash_host import vllm_probe as P
from dflash_host import vllm_unit as U
from dflash_host.files import atomic_write, read_bytes
from dflash_host.model_config import is_multimodal_target
from dflash_host.module import Context, ModuleError, main
from dflash_host.paths import managed_path
from dflash_host.vllm_files import dump, is_tool_file, load_json, load_launch, paths, read_env, remove_tool_file
from dflash_host.vllm_process import POLL_S, server_for, systemctl

ARGS = {
    "state": {"type": "str", "default": "started", "choices": ["rendered", "started", "restarted", "stopped", "absent"]},
    "pidfile": {"type": "path", "required": True},
    "root": {"type": "path", "default": None},
    "venv_python": {"type": "path", "default": None},
    "target_model": {"type": "str", "default": None},
    "drafter_model": {"type": "path", "default": None},
    "served_model_name": {"type": "str", "default": "target"},
    "host": {"type": "str", "default": "127.0.0.1"},
    "port": {"type": "raw", "default": 8000},
    "flavor": {"type": "str", "default": "cuda"},
    "num_speculative_tokens": {"type": "raw", "default": None},
    "speculative_method": {"type": "str", "default": "dflash"},
    "draft_attention_backend": {"type": "str", "default": None},
    "max_model_len": {"type": "raw", "default": None},
    "max_num_batched_tokens": {"type": "raw", "default": None},
    "gpu_memory_utilization": {"type": "raw", "default": None},
    "tensor_parallel_size": {"type": "raw", "default": None},
    "dtype": {"type": "str", "default": None},
    "enforce_eager": {"type": "bool", "default": None},
    "language_model_only": {"type": "raw", "default": "auto"},
    "extra_args": {"type": "list", "default": []},
    "env": {"type": "dict", "default": {}},
    "api_key": {"type": "str", "default": None},
    "api_key_file": {"type": "path", "default": None},
    "hf_token": {"type": "str", "default": None},
    "hf_token_file": {"type": "path", "default": None},
    "cache_root": {"type": "path", "default": None},
    "log": {"type": "path", "default": None},
    "log_keep": {"type": "int", "default": 5},
    "readiness_timeout_s": {"type": "float", "default": 300},
    "stop_grace_s": {"type": "float", "default": 30},
    "smoke_prompt": {"type": "str", "default": "The quick brown fox jumps over the lazy dog. Speculative decoding"},
    "smoke_requests": {"type": "int", "default": 3},
    "smoke_max_tokens": {"type": "int", "default": 32},
    "min_acceptance_rate": {"type": "float", "default": None},
    "acceptance_gate": {"type": "str", "default": "warn", "choices": ["warn", "fail"]},
    "use_systemd": {"type": "raw", "default": "auto"},
    "systemd_present": {"type": "bool", "default": False},
    "service_name": {"type": "str", "default": "dflash-vllm"},
    "unit_dir": {"type": "path", "default": "/etc/systemd/system"},
    "expected_architecture": {"type": "str", "default": None},
    "fingerprint": {"type": "str", "default": None},
    "restart_stale": {"type": "bool", "default": True},
    "only_if_stale": {"type": "bool", "default": False},
}

TREE_EVERY_S = 1.0  # how often the pidfile's process tree is refreshed while waiting
FATAL_SETTLE_S = 0.5  # after a fatal line, wait this long for the traceback to complete or the exit
# Inherited from the worker's environment; everything else comes from the environment file, so that
# the runtime's PYTHONPATH (psutil/tenacity for the modules) never leaks into vLLM.
INHERIT_ENV = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TMPDIR", "TZ")


class NotYet(Exception):
    """A readiness step is not there yet (retried until the budget runs out)."""


class ServerFailed(Exception):
    def __init__(self, what: str, root: list, exit_code: int | None) -> None:
        super().__init__(what)
        self.what, self.root, self.exit_code = what, root, exit_code


# --------------------------------------------------------------------------- the tool's places and files


def check_places(p: dict, log: str | None, root: str | None) -> str | None:
    """The normalised root once the pidfile (the launch files sit beside it) and the log are the tool's places."""
    managed_path(p["pidfile"], "vllm_pidfile", root)
    if log is not None:
        VL.check_log(log, root)
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


# --------------------------------------------------------------------------- rendering


def render(args: dict, ctx: Context) -> dict:
    if not args.get("log"):
        raise ModuleError("vllm_log is empty; set the path of the server's log file")
    log_keep = args["log_keep"]
    if log_keep < 0:
        raise ModuleError(f"log_keep is {log_keep}; it must be 0 or more rotated logs")
    if args["readiness_timeout_s"] <= 0:
        raise ModuleError(f"readiness_timeout_s is {args['readiness_timeout_s']}; it must be more than 0 seconds")
    rate = args.get("min_acceptance_rate")
    if rate is not None and not 0 <= rate <= 1:
        raise ModuleError(f"min_acceptance_rate is {rate}; it must be a fraction from 0 to 1 (e.g. 0.3)")
    if args["smoke_requests"] < 1 or args["smoke_max_tokens"] < 1:
        raise ModuleError("smoke_requests and smoke_max_tokens must be at least 1")
    for name in ("port", "num_speculative_tokens", "max_model_len", "max_num_batched_tokens", "tensor_parallel_size"):
        value = args.get(name)
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            args[name] = int(value.strip())
    gmu = args.get("gpu_memory_utilization")
    if isinstance(gmu, str):
        try:
            args["gpu_memory_utilization"] = float(gmu)
        except ValueError:
            raise ModuleError(f"gpu_memory_utilization is {gmu!r}; it must be a fraction in (0, 1], e.g. 0.9")
    venv_python = args.get("venv_python")
    if venv_python and not ctx.check and not os.path.exists(venv_python):
        raise ModuleError(
            f"venv_python {venv_python} does not exist; the venv role builds the serving environment "
            "(run provision, or fix venv_python)"
        )

    if ctx.check:
        for var in ("target_model", "drafter_model"):
            value = args.get(var)
            if value and L.looks_like_path(value) and not os.path.exists(os.path.expanduser(value)):
                return {
                    "changed": True,
                    "msg": f"would render the vLLM launch once {var} {value} exists (an earlier role creates it)",
                }
    spec = L.resolve(args, is_multimodal_target)
    p = paths(args["pidfile"])
    root = check_places(p, args["log"], args["root"])
    mode = U.choose_mode(args["use_systemd"], args["systemd_present"], os.geteuid() == 0)
    env_text = U.render_env_file(spec["env"])
    unit_path = os.path.join(args["unit_dir"], f"{args['service_name']}.service") if mode == "systemd" else None
    refuse_foreign_targets({p["launch"]: "launch", p["running"]: "running", p["env"]: "env", unit_path: "unit"})
    log = os.path.abspath(args["log"])
    workdir = os.path.dirname(p["pidfile"])
    # The unit names the launch by a digest of what it runs, so it is stable across identical renders.
    pre = U.fingerprint(spec["argv"], env_text, spec["models"], mode, None)
    unit_text = (
        U.render_unit(spec["argv"], p["env"], log, pre[:12], "vLLM server with a DFlash drafter", workdir)
        if mode == "systemd"
        else None
    )
    fp = U.fingerprint(spec["argv"], env_text, spec["models"], mode, unit_text)
    launch = {
        "fingerprint": fp,
        "launch_id": fp[:12],
        "mode": mode,
        "argv": spec["argv"],
        "env": L.masked_env(spec["env"]),
        "env_file": p["env"],
        "api_key_set": "VLLM_API_KEY" in spec["env"],
        "log": log,
        "log_keep": log_keep,
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
        "smoke": {
            "prompt": args["smoke_prompt"],
            "requests": args["smoke_requests"],
            "max_tokens": args["smoke_max_tokens"],
        },
        "acceptance": {"min_rate": rate, "gate": args["acceptance_gate"]},
        "service_name": args["service_name"],
        "unit_path": unit_path,
    }
    old = load_json(p["launch"])
    old_env = read_bytes(p["env"])
    old_unit = read_bytes(unit_path) if unit_path else None
    want = {p["launch"]: dump(launch), p["env"]: env_text.encode()}
    if unit_path:
        want[unit_path] = unit_text.encode()
    differs = [path for path, data in want.items() if read_bytes(path) != data]
    env_mode_ok = old_env is None or (os.stat(p["env"]).st_mode & 0o777) == 0o600
    changed = bool(differs) or not env_mode_ok
    result = {
        "changed": changed,
        "fingerprint": fp,
        "mode": mode,
        "argv": spec["argv"],
        "launch_file": p["launch"],
        "unit_path": unit_path,
        "expected_architectures": spec["expected_architectures"],
    }
    if not changed:
        result["msg"] = f"launch for {spec['served_model_name']} on port {spec['port']} is as rendered ({mode} mode)"
        return result
    if not ctx.check:
        os.makedirs(os.path.dirname(p["launch"]), exist_ok=True)
        atomic_write(p["env"], env_text.encode(), mode=0o600)
        atomic_write(p["launch"], dump(launch), mode=0o600)
        if unit_path and old_unit != unit_text.encode():
            atomic_write(unit_path, unit_text.encode(), mode=0o644)
            systemctl(["daemon-reload"])
            systemctl(["enable", "--", args["service_name"]])
            result["daemon_reload"] = True
    before = {"argv": (old or {}).get("argv"), "env": (old or {}).get("env"), "mode": (old or {}).get("mode")}
    after = {"argv": spec["argv"], "env": launch["env"], "mode": mode}
    if old and old.get("models") != spec["models"]:
        before["models"], after["models"] = old.get("models"), spec["models"]
    result["diff"] = {"before": before, "after": after}
    what = ", ".join(sorted(os.path.basename(x) for x in differs)) or "environment file mode"
    result["msg"] = f"{'would write' if ctx.check else 'wrote'} the vLLM launch ({what}; {mode} mode)"
    return result


# --------------------------------------------------------------------------- readiness


class Follower:
    """The new server's log: the lines after the start marker that names its PID."""

    def __init__(self, path: str, pid: int) -> None:
        self.path, self.pid = path, pid
        self.tail: VL.LogTail | None = None
        self.started = False
        self.lines: list = []

    @classmethod
    def from_now(cls, path: str, pid: int) -> Follower:
        """The lines a running server writes from now on (what it wrote before is checked separately)."""
        follower = cls(path, pid)
        follower.started = True
        try:
            follower.tail = VL.LogTail(path, os.path.getsize(path))
        except OSError:
            pass  # no log at the path (deleted while the server runs): nothing new can be read
        return follower

    def poll(self) -> list:
        if self.tail is None:
            if not os.path.exists(self.path):
                return []
            self.tail = VL.LogTail(self.path)
        new = []
        for line in self.tail.poll():
            if not self.started:
                mk = VL.parse_marker(line)
                self.started = bool(mk and mk["pid"] == self.pid)
                continue
            new.append(line)
        self.lines.extend(new)
        return new

    def close(self) -> None:
        if self.tail:
            self.tail.close()


class Watch:
    """Fail fast: every poll looks at the process and the new log lines before the readiness probe."""

    def __init__(self, server, follower: Follower, deadline: float, ctx: Context) -> None:
        self.server, self.follower, self.deadline, self.ctx = server, follower, deadline, ctx
        self.fatal_at: float | None = None
        self.fatal_line: str | None = None
        self.steps: dict = {}
        self.t0 = time.monotonic()
        self.tree_at = self.t0

    def check(self) -> None:
        if time.monotonic() - self.tree_at >= TREE_EVERY_S:
            self.tree_at = time.monotonic()
            self.server.ready()  # record EngineCore and workers in the pidfile as they appear
        new = self.follower.poll()
        if self.fatal_at is None:
            idx = VL.find_fatal(new)
            if idx is not None:
                self.fatal_at, self.fatal_line = time.monotonic(), new[idx]
        code = self.server.exit_code()
        if code is not None:
            time.sleep(0.05)  # let the last lines reach the file
            self.follower.poll()
            if not getattr(self.server, "exit_code_known", True):  # not our child: no status to quote
                what, code = f"the vLLM process (PID {self.follower.pid}) exited", None
            else:
                what = f"the vLLM process exited with code {code}"
            if self.fatal_line:
                what += f" after {VL.fatal_label(self.fatal_line)}"
            raise ServerFailed(what, VL.root_cause(self._lines()), code)
        if self.fatal_at is not None:
            settled = VL.first_exception(self.follower.lines) is not None
            if settled or time.monotonic() - self.fatal_at >= FATAL_SETTLE_S:
                raise ServerFailed(
                    f"the log shows {VL.fatal_label(self.fatal_line)} while the process still runs",
                    VL.root_cause(self.follower.lines),
                    None,
                )

    def _lines(self) -> list:
        if self.follower.tail is not None:
            extra = self.follower.tail.all_lines()[len(self.follower.tail.lines) :]
            return self.follower.lines + extra
        return self.follower.lines

    def step(self, what: str, probe):
        """Retry `probe` every POLL_S (tenacity) until it answers, the server fails, or the budget ends."""
        t = time.monotonic()
        self.ctx.say(f"vLLM: waiting for {what}")
        remaining = max(0.0, self.deadline - t)
        last: list = [""]
        try:
            for attempt in tenacity.Retrying(
                stop=tenacity.stop_after_delay(remaining),
                wait=tenacity.wait_fixed(POLL_S),
                retry=tenacity.retry_if_exception_type(NotYet),
                reraise=True,
            ):
                with attempt:
                    self.check()
                    try:
                        value = probe()
                    except NotYet as exc:
                        last[0] = str(exc)
                        raise
                    self.steps[what] = round(time.monotonic() - self.t0, 2)
                    return value
        except NotYet:
            raise ServerFailed(
                f"vLLM was not ready within readiness_timeout_s ({self.deadline - self.t0:.0f} s): still waiting "
                f"for {what} ({last[0]})",
                VL.root_cause(self.follower.lines, tail=5),
                None,
            ) from None
        return None


def _quote_the_failure(watch: Watch | None, what: str, seconds: float = 1.5) -> None:
    """The server may be dying on the request just made: watch it briefly, so the failure quotes the log."""
    if watch is None:
        return
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            watch.check()
            time.sleep(POLL_S)
    except ServerFailed as exc:
        exc.what = f"{what}; {exc.what}"
        raise


def _read_counters(url: str, watch: Watch | None) -> dict | None:
    """The spec-decode counters on /metrics (None when the server has none, e.g. without a drafter).

    vLLM always serves /metrics, so no answer means the server is failing (an engine that dies on
    the request drops the connection): that is a ServerFailed, never a server reported as serving.
    A server still alive after the watch's 1.5 s gets one more try (a slow answer is not a crash).
    """
    res = None
    for attempt in range(2):
        res = P.request(url + "/metrics", timeout=5)
        if res.status == 200:
            return M.spec_decode_counters(res.body.decode("utf-8", "replace"))
        if attempt == 0:
            _quote_the_failure(watch, f"/metrics did not answer ({res.describe()}) while acceptance was read")
    what = f"/metrics did not answer twice ({res.describe()}) while acceptance was read"
    raise ServerFailed(what, VL.root_cause(watch.follower.lines) if watch else [], None)


def _smoke_and_acceptance(
    launch: dict, api_key: str | None, watch: Watch | None, ctx: Context, requests: int | None = None
) -> dict:
    """Send smoke completions (so drafts happen) and read the acceptance they produced from /metrics."""
    url = P.base_url(launch["host"], launch["port"])
    smoke = dict(launch["smoke"])
    if requests is not None:
        smoke["requests"] = requests
    before = _read_counters(url, watch)
    tokens_total, sample = 0, ""
    t0 = time.monotonic()
    for i in range(smoke["requests"]):
        ctx.say(f"vLLM: smoke completion {i + 1}/{smoke['requests']}")
        body = {
            "model": launch["served_model_name"],
            "prompt": smoke["prompt"],
            "max_tokens": smoke["max_tokens"],
            "temperature": 0,
            "ignore_eos": True,
        }
        res = P.request(url + "/v1/completions", body, timeout=max(30.0, launch["readiness_timeout_s"] / 2), api_key=api_key)
        tokens, text = P.completion_tokens(res)
        if tokens <= 0:
            _quote_the_failure(watch, f"the smoke completion to /v1/completions returned no tokens ({text})")
            raise ServerFailed(
                f"the smoke completion to /v1/completions returned no tokens ({text})",
                VL.root_cause(watch.follower.lines, tail=5) if watch else [],
                None,
            )
        tokens_total += tokens
        sample = sample or text
    smoke_s = round(time.monotonic() - t0, 3)
    after = _read_counters(url, watch)
    figures = M.acceptance(M.delta(after, before)) if launch.get("speculative") else M.acceptance(None)
    out = {"smoke_tokens": tokens_total, "smoke_s": smoke_s, "smoke_sample": sample[:80]}
    out.update(figures)
    if launch.get("speculative"):
        verdict, sentence = M.gate(figures, launch["acceptance"]["min_rate"], launch["acceptance"]["gate"])
        out["acceptance_verdict"], out["acceptance_msg"] = verdict, sentence
    return out


def _health_probe(url: str, timeout: float):
    """A Watch.step probe: True once /health answers 200."""

    def health():
        res = P.request(url + "/health", timeout=timeout)
        if res.status != 200:
            raise NotYet(f"/health: {res.describe()}")
        return True

    return health


def _models_probe(url: str, api_key: str | None, launch: dict):
    """A Watch.step probe: the served names once /v1/models lists served_model_name."""

    def models():
        res = P.request(url + "/v1/models", timeout=5, api_key=api_key)
        names = P.served_models(res)
        if launch["served_model_name"] not in names:
            raise NotYet(f"/v1/models lists {names or res.describe()}")
        return names

    return models


def _check_architectures(found: list, expected: list) -> list:
    """Expected architectures the log has not shown yet (counted, so target + drafter both appear)."""
    pool = list(found)
    missing = []
    for arch in expected:
        if arch in pool:
            pool.remove(arch)
        else:
            missing.append(arch)
    return missing


def start(launch: dict, p: dict, ctx: Context, server) -> dict:
    """Rotate the log, launch, and watch until ready; on failure stop what was started and say why."""
    log = launch["log"]
    os.makedirs(os.path.dirname(log), exist_ok=True)
    if P.port_in_use(launch["host"], launch["port"]):
        owners = P.port_listeners(launch["port"])
        who = "; ".join(P.describe_owner(o) for o in owners) or "an unknown process"
        raise ModuleError(
            f"port {launch['port']} on {launch['host']} is already taken by {who}; nothing was started. Stop "
            "that program or choose another vllm_port",
            port=launch["port"],
            owners=owners,
        )
    rotation = VL.rotate(log, launch["log_keep"], root=launch.get("root"))
    if rotation["foreign"]:
        ctx.warn(
            f"left {', '.join(rotation['foreign'])} alone: named like rotated logs of {log}, but not written by "
            "dflash-provision (no start marker); they are not pruned (remove them by hand if they are unwanted)"
        )
    env = {k: os.environ[k] for k in INHERIT_ENV if k in os.environ}
    file_env = read_env(p)
    env.update(file_env)
    t_launch = time.monotonic()
    pid = _spawn_recorded(launch, p, ctx, server, env)
    follower = Follower(log, pid)
    watch = Watch(server, follower, t_launch + launch["readiness_timeout_s"], ctx)
    url = P.base_url(launch["host"], launch["port"])
    api_key = file_env.get("VLLM_API_KEY")
    try:
        expected = launch.get("expected_architectures") or []

        def archs():
            missing = _check_architectures(VL.resolved_architectures(follower.lines), expected)
            if not missing:
                return True
            if P.request(url + "/health", timeout=1).status == 200:
                raise ServerFailed(
                    f"vLLM answers /health, but its log never showed `Resolved architecture: {missing[0]}`",
                    [f"Resolved architecture lines seen: {VL.resolved_architectures(follower.lines)}"],
                    None,
                )
            raise NotYet(f"the log shows Resolved architecture: {VL.resolved_architectures(follower.lines)}")

        if expected:
            watch.step("Resolved architecture: " + " and ".join(expected), archs)

        watch.step("/health to answer 200", _health_probe(url, timeout=2))
        ready_at, ready_wall = time.monotonic(), time.time()
        watch.step(f"/v1/models to list {launch['served_model_name']}", _models_probe(url, api_key, launch))
        server.ready()
        figures = _smoke_and_acceptance(launch, api_key, watch, ctx)
        watch.check()
    except ServerFailed as exc:
        follower.close()
        stopped = _undo_start(launch, p, ctx, server)
        raise failure(exc, launch, stopped) from None
    follower.close()
    figures.update(
        pid=pid,
        ready_s=round(ready_at - t_launch, 2),
        ready_at=ready_wall,
        total_s=round(time.monotonic() - t_launch, 2),
        steps=watch.steps,
        rotated_log=rotation["rotated_to"],
        log=log,
        resolved_architectures=VL.resolved_architectures(follower.lines),
    )
    return figures


def _spawn_recorded(launch: dict, p: dict, ctx: Context, server, env: dict) -> int:
    """Spawn the server and record it (pidfile, running.json): the PID.

    When a record cannot be written (a full disk), what was spawned is stopped before the error: a
    server that no file records would hold the port and the GPU, and no later run could prove it ours.
    """
    try:
        pid = server.spawn(env)
        running = {
            "fingerprint": launch["fingerprint"],
            "pid": pid,
            "mode": launch["mode"],
            "log": launch["log"],
            "started_at": time.time(),
        }
        atomic_write(p["running"], dump(running), mode=0o644)
    except ModuleError as exc:
        stopped = _undo_start(launch, p, ctx, server)
        undone = " (the process it had begun was stopped)" if stopped else ""
        raise ModuleError(f"vLLM was not started{undone}: {exc.msg}", **{**exc.data, "start_failed": True}) from None
    return pid


def _undo_start(launch: dict, p: dict, ctx: Context, server) -> dict | None:
    """Stop what this start began (found by pidfile or, without one, by its session) and drop its records."""
    stopped = server.stop(ctx, launch["stop_grace_s"])
    remove_tool_file(p["running"], "running", False)
    if launch["mode"] != "systemd":
        remove_tool_file(p["pidfile"], "pidfile", False)
    return stopped


def failure(exc: ServerFailed, launch: dict, stopped) -> ModuleError:
    root = " | ".join(exc.root) if exc.root else "(the log shows nothing after the start marker)"
    code = f" (exit code {exc.exit_code})" if exc.exit_code is not None else ""
    tail = "; stopped what was left of it" if stopped else ""
    return ModuleError(
        f"vLLM failed: {exc.what}{code}{tail}. Root cause (first exception) in {launch['log']}: {root}. "
        "Fix the cause (model, drafter config, flags, memory) and run again",
        start_failed=True,
        root_cause=exc.root,
        exit_code=exc.exit_code,
        log=launch["log"],
    )


class RunningServer:
    """A server an earlier run started, as Watch sees it: alive while its (proven) top process runs."""

    exit_code_known = False  # not our child: once it ends, its exit status cannot be read

    def __init__(self, pid: int) -> None:
        try:
            self.proc: psutil.Process | None = psutil.Process(pid)
        except psutil.Error:
            self.proc = None

    def exit_code(self) -> int | None:
        """None while it runs; -1 once it has ended."""
        return None if self.proc is not None and _proc.alive(self.proc) else -1

    def ready(self) -> None:
        """A verify changes nothing, not even the pidfile's tree."""


def _starting_until(launch: dict, started_at) -> float | None:
    """The monotonic end of the readiness budget of a server started less than readiness_timeout_s ago."""
    if isinstance(started_at, bool) or not isinstance(started_at, (int, float)):
        return None
    budget = float(launch["readiness_timeout_s"])
    left = min(started_at + budget - time.time(), budget)  # min: a clock set back never stretches it
    return time.monotonic() + left if left > 0 else None


def _wait_for_health(url: str, pid: int, watch: Watch) -> None:
    """A busy server may answer slowly and a dead engine answers 503: 30 tries, then it is unhealthy."""
    health = None
    for _ in range(30):
        watch.check()
        health = P.request(url + "/health", timeout=5)
        if health.status == 200:
            return
        time.sleep(POLL_S)
    raise ServerFailed(f"the running server (PID {pid}) does not answer /health ({health.describe()})", [], None)


def _wait_while_starting(launch: dict, url: str, api_key: str | None, watch: Watch, until: float) -> None:
    """A server still inside its readiness budget (the run that started it was cut off) is waited for."""
    watch.deadline, watch.t0 = until, until - float(launch["readiness_timeout_s"])
    watch.step("/health to answer 200 (the server is still starting)", _health_probe(url, timeout=2))
    watch.step(f"/v1/models to list {launch['served_model_name']}", _models_probe(url, api_key, launch))


def verify_running(launch: dict, p: dict, pid: int, ctx: Context, started_at=None) -> dict:
    """A server already up with the wanted launch: prove it still serves (no restart, no log rotation).

    The process and the log lines it writes meanwhile are watched throughout, so a server that dies
    while it is verified (even on the last /metrics read) fails the verify and is restarted, never
    reported serving. One younger than readiness_timeout_s (running.json's started_at) is still
    starting: it is waited for until its budget ends, not restarted.
    """
    url = P.base_url(launch["host"], launch["port"])
    api_key = read_env(p).get("VLLM_API_KEY")
    follower = Follower.from_now(launch["log"], pid)
    watch = Watch(RunningServer(pid), follower, time.monotonic(), ctx)
    try:
        until = _starting_until(launch, started_at)
        if until is not None:
            _wait_while_starting(launch, url, api_key, watch, until)
        else:
            _wait_for_health(url, pid, watch)
        names = P.served_models(P.request(url + "/v1/models", timeout=5, api_key=api_key))
        if launch["served_model_name"] not in names:
            raise ServerFailed(f"the running server lists {names}, not {launch['served_model_name']}", [], None)
        lines = VL.lines_after_marker(launch["log"], pid) or []
        idx = VL.find_fatal(lines)
        if idx is not None:
            raise ServerFailed(f"the running server's log shows {VL.fatal_label(lines[idx])}", VL.root_cause(lines), None)
        out = _smoke_and_acceptance(launch, api_key, watch, ctx, requests=1)
        watch.check()
    finally:
        follower.close()
    out.update(pid=pid, log=launch["log"])
    return out


# --------------------------------------------------------------------------- states


def _apply_gate(out: dict, ctx: Context) -> None:
    verdict = out.get("acceptance_verdict")
    if verdict == "fail":
        raise ModuleError(
            f"acceptance gate failed: {out['acceptance_msg']} (acceptance_gate: fail; the server keeps running)",
            acceptance_failed=True,
            **{k: v for k, v in out.items() if k != "msg"},
        )
    if verdict == "warn":
        ctx.warn(out["acceptance_msg"])


def _summary(out: dict) -> str:
    rate = out.get("acceptance_rate")
    mal = out.get("mean_acceptance_length")
    acc = f", acceptance {rate:.1%}, mean acceptance length {mal:.2f}" if rate is not None else ""
    return f"PID {out.get('pid')}, smoke {out.get('smoke_tokens')} tokens{acc}"


def ensure_running(args: dict, ctx: Context, force: bool) -> dict:
    p = paths(args["pidfile"])
    if ctx.check and load_json(p["launch"]) is None:
        return {"changed": True, "msg": "would start vLLM once its launch is rendered"}
    launch = load_launch(p)
    server = server_for(launch, p)
    now = server.inspect()
    running = load_json(p["running"]) or {}
    want = args.get("fingerprint") or launch["fingerprint"]
    fresh = now["alive"] and running.get("fingerprint") == want and running.get("pid") == now["pid"]
    reason = None
    if now["alive"] and fresh and force and args["only_if_stale"]:
        # the handler after a start task that already started (and proved) this very launch
        return {"changed": False, "pid": now["pid"], "msg": f"vLLM (PID {now['pid']}) already runs the rendered launch"}
    if now["alive"] and fresh and not (force and not args["only_if_stale"]):
        try:
            out = verify_running(launch, p, now["pid"], ctx, running.get("started_at"))
        except ServerFailed as exc:
            reason = f"the running server was unhealthy ({exc.what}{': ' + ' | '.join(exc.root) if exc.root else ''})"
            ctx.warn(reason + "; restarting it")
        else:
            _apply_gate(out, ctx)
            out.update(changed=False, msg=f"vLLM is running with the rendered launch and serving: {_summary(out)}")
            return out
    elif now["alive"] and not fresh and not force and not args["restart_stale"]:
        return {
            "changed": False,
            "stale": True,
            "pid": now["pid"],
            "msg": f"vLLM (PID {now['pid']}) runs an older launch; the restart handler restarts it",
        }
    if reason is None:
        if now["alive"]:
            reason = "forced restart" if fresh else "the running server's launch differs from the rendered one"
        elif now["procs"]:
            reason = f"leftovers of a dead server ({len(now['procs'])} process(es)) hold on"
        else:
            reason = "no server was running"
    VL.check_log(launch["log"], launch.get("root"))  # a foreign log stops us before the old server is stopped
    if ctx.check:
        return {"changed": True, "msg": f"would (re)start vLLM: {reason}", "reason": reason}
    stopped = server.stop(ctx, launch["stop_grace_s"])
    if launch["mode"] != "systemd":
        remove_tool_file(p["pidfile"], "pidfile", False)
    remove_tool_file(p["running"], "running", False)
    out = start(launch, p, ctx, server)
    out["reason"] = reason
    if stopped:
        out["stopped"] = stopped
    _apply_gate(out, ctx)
    out.update(changed=True, msg=f"started vLLM ({reason}), ready in {out['ready_s']} s: {_summary(out)}")
    return out


def files_to_remove(p: dict, launch: dict, absent: bool, foreign: list) -> list:
    """(path, kind) of what stopping (or, with absent, removing) leaves behind; a misnamed unit goes to `foreign`."""
    files = [(p["running"], "running")]
    if launch["mode"] != "systemd" or absent:
        files.append((p["pidfile"], "pidfile"))
    unit_path = launch.get("unit_path")
    if absent:
        files += [(p["launch"], "launch"), (p["env"], "env")]
    if absent and unit_path:
        # the unit the tool renders is UNIT_DIR/SERVICE_NAME.service; a launch naming another file is not believed
        if os.path.basename(unit_path) == f"{launch.get('service_name')}.service":
            files.append((unit_path, "unit"))
        elif os.path.lexists(unit_path):
            foreign.append(unit_path)
    return files


def _left_alone(foreign: list, ctx: Context) -> None:
    if foreign:
        ctx.warn(
            f"left {', '.join(foreign)} alone: not written by dflash-provision (no start marker, header or "
            "launch record of the tool); remove by hand if unwanted"
        )


def _check_msg(would_stop: bool, removed: list) -> str:
    files = f"remove {len(removed)} file(s)" if removed else ""
    if would_stop:
        return "would stop vLLM" + (f" and {files}" if files else "")
    return f"vLLM is not running; would {files}" if files else "vLLM is not running and nothing is left to remove"


def _warn_reused_pid(now: dict, pidfile: str, removed: list, ctx: Context) -> None:
    """A pidfile whose PID now names another process is stale: say so as it goes, and that the process stays."""
    if pidfile not in removed:
        return
    verb = "would remove" if ctx.check else "removed"
    for entry in now.get("refused", []):
        if entry.get("top"):
            cmd = " ".join(entry.get("cmdline") or [])[:200] or "?"
            ctx.warn(
                f"{verb} the stale pidfile {pidfile}: its PID {entry['pid']} now belongs to another process "
                f"({cmd}; {entry['reason']}), which is left alone"
            )


def stop(args: dict, ctx: Context, absent: bool) -> dict:
    """Stop the whole tree; remove what the tool wrote beside the pidfile (and, with absent, the launch and unit)."""
    p = paths(args["pidfile"])
    launch = load_json(p["launch"]) if is_tool_file(p["launch"], "launch") else None
    if launch is None:
        launch = {"mode": "process", "service_name": args["service_name"]}
    check_places(p, None, args["root"] or launch.get("root"))
    server = server_for(launch, p)
    now = server.inspect()
    foreign: list = []
    files = files_to_remove(p, launch, absent, foreign)
    would_stop = now["alive"] or bool(now["procs"])
    if ctx.check:
        removed = [f for f, kind in files if remove_tool_file(f, kind, True, foreign)]
        _left_alone(foreign, ctx)
        _warn_reused_pid(now, p["pidfile"], removed, ctx)
        return {
            "changed": would_stop or bool(removed),
            "msg": _check_msg(would_stop, removed),
            "removed": removed,
            "foreign": foreign,
        }
    stopped = server.stop(ctx, float(launch.get("stop_grace_s", args["stop_grace_s"]))) if would_stop else None
    removed = [f for f, kind in files if remove_tool_file(f, kind, False, foreign)]
    _left_alone(foreign, ctx)
    _warn_reused_pid(now, p["pidfile"], removed, ctx)
    if absent and launch.get("unit_path") in removed:
        systemctl(["disable", "--", launch["service_name"]], check=False)
        systemctl(["daemon-reload"], check=False)
    parts = []
    if stopped:
        n = len(stopped.get("stopped", []))
        parts.append(f"stopped vLLM ({n} process(es) in {stopped.get('seconds', 0)} s)")
    if removed:
        parts.append(f"removed {', '.join(os.path.basename(f) for f in removed)}")
    msg = "; ".join(parts) if parts else "vLLM is not running and nothing is left to remove"
    return {"changed": bool(stopped) or bool(removed), "msg": msg, "stopped": stopped, "removed": removed, "foreign": foreign}


def run(args: dict, ctx: Context) -> dict:
    state = args["state"]
    if state == "rendered":
        return render(args, ctx)
    if state == "started":
        return ensure_running(args, ctx, force=False)
    if state == "restarted":
        return ensure_running(args, ctx, force=True)
    return stop(args, ctx, absent=state == "absent")


if __name__ == "__main__":
    main(ARGS, run)
