"""A small closed-loop load generator for an OpenAI-compatible server (/v1/completions, /v1/chat/completions).

The fallback for serving_bench where `vllm bench serve` cannot run (no vllm CLI beside the serving
environment's python, or it fails to start). Closed loop: `concurrency` threads, each sending its
next request as soon as its previous one finished, until `requests` were sent. Every request streams
(`stream: true`, usage in the last chunk) at the given temperature (0: greedy). Measured per request, as
vllm bench serve does: TTFT = the first chunk carrying `choices` (for a chat, the first with content: its first
chunk only names the role), latency = the last such chunk, output and prompt tokens = the usage's counts.

A request is {"prompt": text or token ids} (a completion) or {"messages": [...]} (a chat: the server applies the
target's chat template), with an optional "max_tokens". Random prompts are lists of token ids (the completions
API accepts them), so each is exactly `input_len` tokens without a tokenizer on the host: ids drawn with a fixed
seed from [low, vocab_size); they ignore EOS, so each produces exactly max_tokens.
Standard library only (http.client, threading).
"""

from __future__ import annotations

import http.client
import json
import random
import threading
import time
import urllib.parse

STREAM_READ_LIMIT = 1 << 20  # one SSE line longer than this is not a completion chunk


def token_prompts(count: int, input_len: int, vocab_size: int, seed: int) -> list:
    """`count` prompts of `input_len` token ids each, drawn from the lower part of the vocabulary.

    Low ids below 10 are skipped (special tokens sit there in small vocabularies); real models put
    their special tokens at the top, and ids are drawn below min(vocab_size, 32000) - 1."""
    rng = random.Random(seed)  # noqa: S311 - reproducible prompts, not secrets
    high = max(12, min(vocab_size, 32000) - 1)
    return [[rng.randrange(10, high) for _ in range(input_len)] for _ in range(count)]


class Endpoint:
    """Where requests go: scheme, host, port and the path of /v1/completions under the base URL."""

    def __init__(self, base_url: str, api_key: str | None, timeout_s: float) -> None:
        parts = urllib.parse.urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{base_url!r} is not an http(s)://host:port URL")
        self.https = parts.scheme == "https"
        self.host = parts.hostname
        self.port = parts.port or (443 if self.https else 80)
        self.base = parts.path.rstrip("/")
        self.path = self.base + "/v1/completions"
        self.api_key = api_key
        self.timeout_s = timeout_s

    def connect(self) -> http.client.HTTPConnection:
        cls = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
        return cls(self.host, self.port, timeout=self.timeout_s)

    def headers(self) -> dict:
        out = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if self.api_key:
            out["Authorization"] = f"Bearer {self.api_key}"
        return out


def _events(resp: http.client.HTTPResponse):
    """The JSON payloads of a server-sent event stream, until [DONE] or the end of the body."""
    while True:
        line = resp.readline(STREAM_READ_LIMIT)
        if not line:
            return
        line = line.strip()
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            return
        try:
            payload = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            continue
        if isinstance(payload, dict):
            yield payload


def _carries_text(event: dict, chat: bool) -> bool:
    """A chunk with a choice (a completion's may be empty text: special tokens); a chat's must carry content."""
    choices = event.get("choices")
    if not choices:
        return False
    if not chat:
        return True
    delta = (choices[0] or {}).get("delta") or {} if isinstance(choices[0], dict) else {}
    return bool(delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning"))


def one_request(endpoint: Endpoint, body: dict) -> dict:
    """Send one streaming request: {ok, ttft_s, latency_s, output_tokens, prompt_tokens, error}."""
    out = {"ok": False, "ttft_s": 0.0, "latency_s": 0.0, "output_tokens": 0, "prompt_tokens": None, "error": ""}
    chat = "messages" in body
    path = endpoint.base + ("/v1/chat/completions" if chat else "/v1/completions")
    conn = endpoint.connect()
    start = time.perf_counter()
    try:
        conn.request("POST", path, json.dumps(body).encode(), endpoint.headers())
        resp = conn.getresponse()
        if resp.status != 200:
            out["error"] = f"HTTP {resp.status}: {resp.read(300).decode('utf-8', 'replace').strip()}"
            return out
        chunks, usage_tokens, last, first_any = 0, None, start, None
        for event in _events(resp):
            if event.get("choices") and first_any is None:
                first_any = time.perf_counter()
            if _carries_text(event, chat):
                last = time.perf_counter()
                if chunks == 0:
                    out["ttft_s"] = last - start
                chunks += 1
            usage = event.get("usage")
            if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
                usage_tokens = usage["completion_tokens"]
                out["prompt_tokens"] = usage.get("prompt_tokens")
        if chunks == 0 and usage_tokens is not None and first_any is not None:  # a chat answered at once (EOS):
            last = first_any                                                    # no text, but a whole response
            out["ttft_s"] = last - start
        out["latency_s"] = last - start
        out["output_tokens"] = usage_tokens if usage_tokens is not None else chunks
        out["ok"] = chunks > 0 or (usage_tokens is not None and first_any is not None)
        if not out["ok"]:
            out["error"] = "the stream carried no completion chunk"
    except (OSError, http.client.HTTPException) as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        conn.close()
    return out


def request_body(model: str, item: dict | list, max_tokens: int, temperature: float = 0.0) -> dict:
    """The JSON body of one request: token ids (random: EOS ignored, exactly max_tokens), a prompt or a chat."""
    body: dict = {"model": model, "max_tokens": max_tokens, "temperature": temperature, "stream": True,
                  "stream_options": {"include_usage": True}}
    if isinstance(item, list):
        body.update(prompt=item, ignore_eos=True)
        return body
    body["max_tokens"] = item.get("max_tokens") or max_tokens
    if "messages" in item:
        body["messages"] = item["messages"]
    else:
        body["prompt"] = item["prompt"]
    return body


def closed_loop(endpoint: Endpoint, model: str, prompts: list, max_tokens: int, concurrency: int,
                temperature: float = 0.0) -> tuple:
    """Send every request with at most `concurrency` in flight: (records in request order, wall seconds)."""
    records: list = [None] * len(prompts)
    next_index = iter(range(len(prompts)))
    lock = threading.Lock()

    def worker() -> None:
        while True:
            with lock:
                i = next(next_index, None)
            if i is None:
                return
            records[i] = one_request(endpoint, request_body(model, prompts[i], max_tokens, temperature))

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(max(1, min(concurrency, len(prompts))))]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return records, time.perf_counter() - start
