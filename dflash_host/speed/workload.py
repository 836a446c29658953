"""What the speed measurements send: the operator's prompts, the built-in mixed workload, or random tokens.

A drafter's acceptance depends on the traffic (math and code accept long drafts, chat shorter ones), so a verdict
on random tokens says little about the operator's server. Three workloads, each named in every result:
- file: `speed_prompts`, JSONL on the control node (pushed to the host), one request a line:
  {"prompt": "..."} (a completion, sent as written) or {"messages": [{"role": "user", "content": "..."}, ...]}
  (a chat: the target's chat template applies), optionally "max_tokens". Named by its sha256.
- builtin: chat, code, math, summarisation and support requests this module writes itself (no copied dataset), the
  same every time (BUILTIN_VERSION names the set), each a one-turn chat. The support requests all start with the
  same product notes (SUPPORT_NOTES, as a shared system prompt or few-shot block would in real traffic), so the
  prefix cache has something to hit: serving-bench compares its hit rate with and without the drafter. The notes
  lead the user turn, not a system message, because vllm bench serve's custom dataset carries one turn only.
- random: token ids (only when asked: speed_workload random).
Parsing refuses, naming the file and line, whatever a server would reject or misread. Standard library only.
"""

from __future__ import annotations

import hashlib
import json

BUILTIN_VERSION = "builtin-v2"
MAX_FILE_BYTES = 64 * 2**20
MAX_REQUESTS = 100_000
ROLES = ("system", "user", "assistant", "tool", "developer")
KEYS = {"prompt", "messages", "max_tokens"}


class WorkloadError(ValueError):
    """A prompts file that cannot be replayed: the message names the file, the line and the fix."""


def _fail(where: str, line: int, why: str) -> WorkloadError:
    return WorkloadError(f"{where} line {line}: {why}; each line must be one JSON object, {{\"prompt\": \"...\"}} or "
                         "{\"messages\": [{\"role\": \"user\", \"content\": \"...\"}]}, optionally with \"max_tokens\"")


def _message(item: object, where: str, line: int, i: int) -> dict:
    if not (isinstance(item, dict) and item.get("role") in ROLES and isinstance(item.get("content"), str)):
        raise _fail(where, line, f"messages[{i}] is not {{\"role\": one of {', '.join(ROLES)}, \"content\": text}}")
    return {"role": item["role"], "content": item["content"]}


def _request(data: object, where: str, line: int) -> dict:
    if not isinstance(data, dict):
        raise _fail(where, line, f"a JSON {type(data).__name__}, not an object")
    unknown = sorted(set(data) - KEYS)
    if unknown:
        raise _fail(where, line, f"unknown key(s) {', '.join(map(repr, unknown))}")
    if ("prompt" in data) == ("messages" in data):
        raise _fail(where, line, "it must have exactly one of \"prompt\" and \"messages\"")
    out: dict = {}
    if "prompt" in data:
        if not (isinstance(data["prompt"], str) and data["prompt"].strip()):
            raise _fail(where, line, "\"prompt\" is not a non-empty text")
        out["prompt"] = data["prompt"]
    else:
        msgs = data["messages"]
        if not (isinstance(msgs, list) and msgs):
            raise _fail(where, line, "\"messages\" is not a non-empty list")
        out["messages"] = [_message(m, where, line, i) for i, m in enumerate(msgs)]
    if "max_tokens" in data:
        value = data["max_tokens"]
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1_000_000:
            raise _fail(where, line, f"\"max_tokens\" is {value!r}, not a whole number of at least 1")
        out["max_tokens"] = value
    return out


def parse_prompts(raw: bytes, where: str) -> list[dict]:
    """The requests of a prompts file (bytes as read); WorkloadError naming `where` and the line otherwise."""
    if len(raw) > MAX_FILE_BYTES:
        raise WorkloadError(f"{where} is {len(raw)} bytes, more than {MAX_FILE_BYTES} (64 MiB); keep a sample of the traffic")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise WorkloadError(f"{where} is not UTF-8 text (byte {exc.start}); save it as UTF-8 JSONL") from None
    out = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise _fail(where, number, f"not JSON ({exc.msg} at column {exc.colno})") from None
        out.append(dict(_request(data, where, number), line=number))
        if len(out) > MAX_REQUESTS:
            raise WorkloadError(f"{where} has more than {MAX_REQUESTS} requests; keep a sample of the traffic")
    if not out:
        raise WorkloadError(f"{where} has no request (it is empty or blank); put one JSON request per line")
    return out


def describe_file(raw: bytes, requests: list[dict], path: str) -> dict:
    return {"name": "file", "file": path, "sha256": hashlib.sha256(raw).hexdigest(), "requests": len(requests),
            "chat": sum(1 for r in requests if "messages" in r)}


# --------------------------------------------------------------------------- the built-in workload

_CHAT = [("a new team member", "how code review works here"), ("a customer", "why their order is late"),
         ("a friend", "how to start running"), ("a student", "what a hash table is"),
         ("a manager", "why the release slipped a week"), ("a neighbour", "how to fix a dripping tap"),
         ("a traveller", "what to pack for three days of rain"), ("a new user", "how to reset a password")]
_TONES = ["briefly", "kindly", "in plain words", "step by step"]
_CODE = [("a Python function", "returns the n-th Fibonacci number iteratively"),
         ("a Python function", "checks whether a string is a palindrome, ignoring case and spaces"),
         ("a SQL query", "lists the ten customers with the highest total order value"),
         ("a Bash script", "deletes log files older than seven days in a folder given as its argument"),
         ("a Python class", "implements a fixed-size ring buffer with push and pop"),
         ("a JavaScript function", "debounces another function by a given number of milliseconds"),
         ("a Rust function", "merges two sorted vectors into one sorted vector"),
         ("a Go function", "counts the words in a text, returning a map from word to count")]
_MATH = ["A train travels {a} km in {b} hours. What is its average speed in km/h? Show the steps.",
         "Solve for x: {a}x + {b} = {c}. Explain each step.",
         "What is the sum of all integers from 1 to {a}? Derive the formula you use.",
         "A rectangle has a perimeter of {c} cm and one side of {a} cm. What is its area? Show your work.",
         "If {a} workers build a wall in {b} days, how long do {c} workers take at the same rate? Reason it out."]
_TOPICS = ["the history of the printing press", "how vaccines train the immune system", "why the sky is blue",
           "how a bill becomes a law", "the water cycle", "how compilers turn source code into machine code",
           "the causes of inflation", "how bees communicate"]


_ASKS = ["", " Give one example.", " End with a question back to them.", " Use at most five sentences."]
_LANGS = ["", " Use type hints where the language has them.", " Explain the approach in two sentences first.",
          " Prefer the standard library."]


def _chat(i: int) -> str:
    who, what = _CHAT[i % len(_CHAT)]
    ask = _ASKS[(i // (len(_CHAT) * len(_TONES))) % len(_ASKS)]
    return f"Explain to {who}, {_TONES[(i // len(_CHAT)) % len(_TONES)]}, {what}.{ask}"


def _code(i: int) -> str:
    kind, does = _CODE[i % len(_CODE)]
    extra = ["Add a docstring.", "Include two test cases.", "Handle invalid input.", "Keep it under 30 lines."]
    lang = _LANGS[(i // (len(_CODE) * len(extra))) % len(_LANGS)]
    return f"Write {kind} that {does}. {extra[(i // len(_CODE)) % len(extra)]}{lang}"


def _math(i: int) -> str:
    a, b = 12 + (i * 7) % 90, 2 + (i * 3) % 9
    return _MATH[i % len(_MATH)].format(a=a, b=b, c=a * b + (i % 5) * 2 + 4)


def _summary(i: int) -> str:
    topic = _TOPICS[i % len(_TOPICS)]
    sentences = [f"This note is about {topic}.",
                 f"It was written for readers who know little about {topic} and want the main ideas.",
                 "The first part gives the background and the people or forces involved.",
                 "The second part walks through the process in order, with one example for each stage.",
                 "The last part lists common misunderstandings and why they are wrong."]
    length = ["in one sentence", "in three bullet points", "in about fifty words", "for a ten-year-old"]
    audience = ["", " Keep the technical terms.", " Avoid jargon.", " Start with the most surprising point."]
    pick = audience[(i // (len(_TOPICS) * len(length))) % len(audience)]
    return " ".join(sentences) + f" Summarise this note {length[(i // len(_TOPICS)) % len(length)]}.{pick}"


SUPPORT_NOTES = (
    "Support notes. The Harbor 3 router has four LAN ports and two radios. A ten-second reset with a pin restores "
    "the password printed under it. Updates run at night, lights blinking blue. Red light: no connection to the "
    "provider; amber: no address given. Guest networks expire after a day. Warranty: two years. Answer from "
    "these notes only."
)
_SUPPORT = ["The light on my router is red, what do I do?", "How long does the warranty last?",
            "Can I give my visitors their own network?", "My router blinks blue at night, is it broken?",
            "I forgot the admin password.", "How many cables can I plug in?", "What does an amber light mean?",
            "Can I block games on my son's tablet?", "Does the router do 6 GHz?"]


def _support(i: int) -> str:
    return f"{SUPPORT_NOTES}\n\nCustomer: {_SUPPORT[i % len(_SUPPORT)]}{_ASKS[(i // len(_SUPPORT)) % len(_ASKS)]}"


KINDS = {"chat": _chat, "code": _code, "math": _math, "summary": _summary, "support": _support}


def builtin_requests(count: int = 256) -> list[dict]:
    """`count` one-turn chat requests, the kinds taking turns (chat, code, math, summary, support), the same every time."""
    names = list(KINDS)
    return [{"messages": [{"role": "user", "content": KINDS[names[i % len(names)]](i // len(names))}],
             "kind": names[i % len(names)]} for i in range(count)]


def describe_builtin(requests: list[dict]) -> dict:
    return {"name": "builtin", "version": BUILTIN_VERSION, "requests": len(requests),
            "sha256": hashlib.sha256(json.dumps(requests, sort_keys=True).encode()).hexdigest(),
            "kinds": sorted({r.get("kind", "") for r in requests})}


def cycle(requests: list[dict], count: int, start: int = 0) -> list[dict]:
    """`count` requests taken in order from `start`, wrapping around (a repetition longer than the file)."""
    return [requests[(start + i) % len(requests)] for i in range(count)]
