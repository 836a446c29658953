"""Proving that a vLLM server serves: readiness, a smoke completion, and the drafter's acceptance.

A new server is ready once its log shows the expected `Resolved architecture:` lines, /health answers
200 and /v1/models lists the served name (wait_until_ready); then smoke completions are sent so that
drafts happen, and the acceptance they produced is read from /metrics (smoke_and_acceptance). A server
already running with the wanted launch is verified the same way without a restart (verify_running).
Then two checks for what vLLM does not report (vllm.smoke_checks): the prefix cache (both) and, on a new
server, a burst at its max concurrency. All of it runs under a Watch (dflash_host.vllm.process), so a server that dies meanwhile fails the
proof, quoting its log, and is never reported serving. A headless node of a multi-node vLLM has no HTTP
API: it is ready once it lives and its log shows vLLM's headless launch line (wait_until_launched,
verify_headless); its workers and their link to the head are library/vllm_cluster's to verify.
Used by vllm.start and vllm.server.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable

from dflash_host.vllm.cluster import headless_launch
from dflash_host.vllm.log import fatal_label, find_fatal, lines_after_marker, resolved_architectures, root_cause
from dflash_host.vllm.metrics import acceptance, delta, gate, spec_decode_counters
from dflash_host.vllm.probe import base_url, completion_tokens, request, served_models
from dflash_host.vllm.process import POLL_S, Follower, NotYet, RunningServer, ServerFailed, Watch
from dflash_host.vllm.records import read_env
from dflash_host.vllm.smoke_checks import check_burst, check_prefix_cache, completion_timeout, smoke_body

if TYPE_CHECKING:  # annotations only
    from dflash_host.module import Context


# --------------------------------------------------------------------------- probes for Watch.step


def health_probe(url: str, timeout: float) -> Callable[[], bool]:
    """A Watch.step probe: True once /health answers 200."""

    def health() -> bool:
        res = request(url + "/health", timeout=timeout)
        if res.status != 200:
            raise NotYet(f"/health: {res.describe()}")
        return True

    return health


def models_probe(url: str, api_key: str | None, launch: dict) -> Callable[[], list]:
    """A Watch.step probe: the served names once /v1/models lists served_model_name."""

    def models() -> list:
        res = request(url + "/v1/models", timeout=5, api_key=api_key)
        names = served_models(res)
        if launch["served_model_name"] not in names:
            raise NotYet(f"/v1/models lists {names or res.describe()}")
        return names

    return models


def missing_architectures(found: list, expected: list) -> list:
    """Expected architectures the log has not shown yet (counted, so target + drafter both appear)."""
    pool = list(found)
    missing = []
    for arch in expected:
        if arch in pool:
            pool.remove(arch)
        else:
            missing.append(arch)
    return missing


def architectures_probe(url: str, follower: Follower, expected: list) -> Callable[[], bool]:
    """A Watch.step probe: True once the log shows every expected `Resolved architecture:`; a server that
    answers /health without having shown them loaded something else (ServerFailed)."""

    def archs() -> bool:
        seen = resolved_architectures(follower.lines)
        missing = missing_architectures(seen, expected)
        if not missing:
            return True
        if request(url + "/health", timeout=1).status == 200:
            raise ServerFailed(
                f"vLLM answers /health, but its log never showed `Resolved architecture: {missing[0]}`",
                [f"Resolved architecture lines seen: {seen}"],
                None,
            )
        raise NotYet(f"the log shows Resolved architecture: {seen}")

    return archs


# --------------------------------------------------------------------------- smoke and acceptance


def read_counters(url: str, watch: Watch | None) -> dict | None:
    """The spec-decode counters on /metrics (None when the server has none, e.g. without a drafter).

    vLLM always serves /metrics, so no answer means the server is failing (an engine that dies on
    the request drops the connection): that is a ServerFailed, never a server reported as serving.
    A server still alive after the watch's 1.5 s gets one more try (a slow answer is not a crash).
    """
    res = None
    for attempt in range(2):
        res = request(url + "/metrics", timeout=5)
        if res.status == 200:
            return spec_decode_counters(res.body.decode("utf-8", "replace"))
        if attempt == 0 and watch is not None:
            watch.quote_the_failure(f"/metrics did not answer ({res.describe()}) while acceptance was read")
    what = f"/metrics did not answer twice ({res.describe() if res else 'no answer'}) while acceptance was read"
    raise ServerFailed(what, root_cause(watch.follower.lines) if watch else [], None)


def smoke(launch: dict, api_key: str | None, watch: Watch | None, ctx: Context, requests: int) -> tuple:
    """(tokens, first text) of `requests` smoke completions; one that returns no tokens is a ServerFailed."""
    url = base_url(launch["host"], launch["port"])
    body = smoke_body(launch, launch["smoke"]["prompt"])
    tokens_total, sample = 0, ""
    for i in range(requests):
        ctx.say(f"vLLM: smoke completion {i + 1}/{requests}")
        res = request(url + "/v1/completions", body, timeout=completion_timeout(launch), api_key=api_key)
        tokens, text = completion_tokens(res)
        if tokens <= 0:
            what = f"the smoke completion to /v1/completions returned no tokens ({text})"
            if watch is not None:
                watch.quote_the_failure(what)
            raise ServerFailed(what, root_cause(watch.follower.lines, tail=5) if watch else [], None)
        tokens_total += tokens
        sample = sample or text
    return tokens_total, sample


def smoke_and_acceptance(
    launch: dict, api_key: str | None, watch: Watch | None, ctx: Context, requests: int | None = None
) -> dict:
    """Send smoke completions (so drafts happen) and read the acceptance they produced from /metrics."""
    url = base_url(launch["host"], launch["port"])
    before = read_counters(url, watch)
    t0 = time.monotonic()
    tokens, sample = smoke(launch, api_key, watch, ctx, launch["smoke"]["requests"] if requests is None else requests)
    smoke_s = round(time.monotonic() - t0, 3)
    after = read_counters(url, watch)
    figures = acceptance(delta(after, before)) if launch.get("speculative") else acceptance(None)
    out: dict[str, Any] = {"smoke_tokens": tokens, "smoke_s": smoke_s, "smoke_sample": sample[:80]}
    out.update(figures)
    if launch.get("speculative"):
        verdict, sentence = gate(figures, launch["acceptance"]["min_rate"], launch["acceptance"]["gate"])
        out["acceptance_verdict"], out["acceptance_msg"] = verdict, sentence
    out.update(check_prefix_cache(launch, api_key, ctx))  # after the acceptance read: its requests are not counted
    return out


# --------------------------------------------------------------------------- a new server


def wait_until_ready(launch: dict, watch: Watch, api_key: str | None, ctx: Context) -> dict:
    """The new server's readiness steps, then smoke and acceptance: the figures, with ready_at/ready_wall."""
    url = base_url(launch["host"], launch["port"])
    expected = launch.get("expected_architectures") or []
    if expected:
        watch.step("Resolved architecture: " + " and ".join(expected), architectures_probe(url, watch.follower, expected))
    watch.step("/health to answer 200", health_probe(url, timeout=2))
    ready_at, ready_wall = time.monotonic(), time.time()
    watch.step(f"/v1/models to list {launch['served_model_name']}", models_probe(url, api_key, launch))
    watch.server.ready()
    figures = smoke_and_acceptance(launch, api_key, watch, ctx)
    figures.update(check_burst(launch, api_key, watch, ctx))  # a new server only: never a load on a running one
    watch.check()
    figures.update(ready_at=ready_at, ready_wall=ready_wall)
    return figures


# --------------------------------------------------------------------------- a server already running


def starting_until(launch: dict, started_at: Any) -> float | None:
    """The monotonic end of the readiness budget of a server started less than readiness_timeout_s ago."""
    if isinstance(started_at, bool) or not isinstance(started_at, (int, float)):
        return None
    budget = float(launch["readiness_timeout_s"])
    left = min(started_at + budget - time.time(), budget)  # min: a clock set back never stretches it
    return time.monotonic() + left if left > 0 else None


def wait_for_health(url: str, pid: int, watch: Watch) -> None:
    """A busy server may answer slowly and a dead engine answers 503: 30 tries, then it is unhealthy."""
    health = None
    for _ in range(30):
        watch.check()
        health = request(url + "/health", timeout=5)
        if health.status == 200:
            return
        time.sleep(POLL_S)
    what = health.describe() if health else "no answer"
    raise ServerFailed(f"the running server (PID {pid}) does not answer /health ({what})", [], None)


def wait_while_starting(launch: dict, url: str, api_key: str | None, watch: Watch, until: float) -> None:
    """A server still inside its readiness budget (the run that started it was cut off) is waited for."""
    watch.deadline, watch.t0 = until, until - float(launch["readiness_timeout_s"])
    watch.step("/health to answer 200 (the server is still starting)", health_probe(url, timeout=2))
    watch.step(f"/v1/models to list {launch['served_model_name']}", models_probe(url, api_key, launch))


def check_serving(launch: dict, url: str, api_key: str | None, pid: int) -> None:
    """The running server lists the served name and its log shows no fatal line since its start."""
    names = served_models(request(url + "/v1/models", timeout=5, api_key=api_key))
    if launch["served_model_name"] not in names:
        raise ServerFailed(f"the running server lists {names}, not {launch['served_model_name']}", [], None)
    lines = lines_after_marker(launch["log"], pid) or []
    idx = find_fatal(lines)
    if idx is not None:
        raise ServerFailed(f"the running server's log shows {fatal_label(lines[idx])}", root_cause(lines), None)


def verify_running(launch: dict, p: dict, pid: int, ctx: Context, started_at: Any = None) -> dict:
    """A server already up with the wanted launch: prove it still serves (no restart, no log rotation).

    The process and the log lines it writes meanwhile are watched throughout, so a server that dies
    while it is verified (even on the last /metrics read) fails the verify and is restarted, never
    reported serving. One younger than readiness_timeout_s (running.json's started_at) is still
    starting: it is waited for until its budget ends, not restarted.
    """
    url = base_url(launch["host"], launch["port"])
    api_key = read_env(p).get("VLLM_API_KEY")
    follower = Follower.from_now(launch["log"], pid)
    watch = Watch(RunningServer(pid), follower, time.monotonic(), ctx)
    try:
        until = starting_until(launch, started_at)
        if until is not None:
            wait_while_starting(launch, url, api_key, watch, until)
        else:
            wait_for_health(url, pid, watch)
        check_serving(launch, url, api_key, pid)
        out = smoke_and_acceptance(launch, api_key, watch, ctx, requests=1)
        watch.check()
    finally:
        follower.close()
    out.update(pid=pid, log=launch["log"])
    return out


# --------------------------------------------------------------------------- a headless node (no HTTP API)


def launched_probe(follower: Follower, expected: list) -> Callable[[], str]:
    """A Watch.step probe: vLLM's headless launch line once the log shows it; a launch without the expected
    `Resolved architecture:` lines loaded something else (ServerFailed)."""

    def launched() -> str:
        line = headless_launch(follower.lines)
        if line is None:
            raise NotYet("the log has not shown vLLM's headless launch line yet")
        seen = resolved_architectures(follower.lines)
        missing = missing_architectures(seen, expected)
        if missing:
            raise ServerFailed(
                f"vLLM launched headless, but its log never showed `Resolved architecture: {missing[0]}`",
                [f"Resolved architecture lines seen: {seen}"],
                None,
            )
        return line

    return launched


def wait_until_launched(launch: dict, watch: Watch) -> dict:
    """A new headless node's readiness: alive, and its log shows the headless launch line (no HTTP, no smoke)."""
    expected = launch.get("expected_architectures") or []
    line = watch.step("vLLM's headless launch line", launched_probe(watch.follower, expected))
    ready_at, ready_wall = time.monotonic(), time.time()
    watch.server.ready()  # record the processes seen so far in the pidfile's tree
    watch.check()
    return {"headless_launch": line, "ready_at": ready_at, "ready_wall": ready_wall}


def verify_headless(launch: dict, pid: int, ctx: Context, started_at: Any = None) -> dict:
    """A headless node already up with the wanted launch: alive, its log since its start shows the launch line
    and no fatal line. One younger than readiness_timeout_s is waited for until its budget ends."""
    follower = Follower(launch["log"], pid)  # every line since its start marker
    watch = Watch(RunningServer(pid), follower, time.monotonic(), ctx)
    try:
        until = starting_until(launch, started_at)
        follower.poll()
        if until is not None and headless_launch(follower.lines) is None:
            watch.deadline, watch.t0 = until, until - float(launch["readiness_timeout_s"])
            watch.step("vLLM's headless launch line (the node is still starting)",
                       launched_probe(follower, launch.get("expected_architectures") or []))
        watch.check()
        lines = follower.all_lines()
        idx = find_fatal(lines)
        if idx is not None:
            raise ServerFailed(f"the running headless node's log shows {fatal_label(lines[idx])}", root_cause(lines), None)
        line = headless_launch(lines)
        if line is None:
            raise ServerFailed(
                f"the running headless node (PID {pid}) never logged vLLM's headless launch line",
                root_cause(lines, tail=5),
                None,
            )
    finally:
        follower.close()
    return {"pid": pid, "log": launch["log"], "headless_launch": line}
