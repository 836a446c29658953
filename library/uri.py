"""Make an HTTP request and check its status and, optionally, fields of its JSON answer.

No role or playbook uses it (vllm_server probes the server itself) and the benchmark does not either:
it is a general module for user playbooks (tests/engine/test_general_modules_play.py runs it).

For health checks and smoke tests of the served model (`/health` 200, `/v1/models` lists the served
name). Read-only by default: never changed; a request with another method than GET/HEAD counts as a
change only when the task says `mutating: true`, and such a request is not sent in check mode.
Headers that look secret (Authorization, Cookie, *token*, *key*, *secret*, *password*) are never
echoed in the result, nor is a password in the URL.

Result: `status`, `url`, `method`, `headers` (the response's, secrets redacted), `elapsed_s`,
`request_headers` (redacted), and with return_content `content` (cut at 1 MiB) and `json`.
"""

from __future__ import annotations

import json
import socket
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request

from dflash_host.module import Context, ModuleError, main

ARGS = {
    "url": {"type": "str", "required": True, "help": "http:// or https:// URL"},
    "method": {"type": "str", "default": "GET", "help": "HTTP method"},
    "headers": {"type": "dict", "default": None, "help": "request headers (none: no extra headers)"},
    "body": {"type": "str", "default": None, "help": "request body (text)"},
    "json": {"type": "raw", "default": None, "help": "request body as JSON (a mapping or list); sets Content-Type"},
    "status_code": {"type": "raw", "default": [200], "help": "accepted status code(s): an int or a list"},
    "timeout_s": {"type": "float", "default": 30.0, "help": "give up on a response after this many seconds"},
    "expect_json": {
        "type": "dict",
        "default": None,
        "help": '{dotted.key: expected value} checked in the JSON answer ("data.0.id": "target")',
    },
    "return_content": {
        "type": "bool",
        "default": False,
        "help": "put the body (content, and json when it parses) in the result",
    },
    "mutating": {
        "type": "bool",
        "default": False,
        "help": "the request changes the server: report changed, and do not send it in check mode",
    },
    "validate_certs": {"type": "bool", "default": True, "help": "check the server's TLS certificate"},
}

CONTENT_LIMIT = 1024 * 1024  # bytes of the body kept in the result
QUOTE_LIMIT = 500  # characters of the body quoted in a failure message
SECRET_WORDS = ("authorization", "cookie", "token", "key", "secret", "password")
READ_ONLY = ("GET", "HEAD")
_MISSING = object()


def is_secret_header(name: str) -> bool:
    low = name.lower()
    return any(word in low for word in SECRET_WORDS)


def redact_headers(headers: dict) -> dict:
    return {k: ("<redacted>" if is_secret_header(k) else v) for k, v in headers.items()}


def redact_url(url: str) -> str:
    """The URL without a password in its user-info part."""
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    netloc = f"{parts.username}:<redacted>@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def parse_status_codes(value: object) -> list[int]:
    items = value if isinstance(value, (list, tuple)) else [value]
    out = []
    for v in items:
        try:
            if isinstance(v, bool):
                raise ValueError
            code = int(v)
        except (TypeError, ValueError):
            raise ModuleError(
                f"module 'uri': status_code must be an int or a list of ints, got {value!r}; e.g. status_code: [200, 204]"
            )
        if not 100 <= code <= 599:
            raise ModuleError(f"module 'uri': status_code {code} is not an HTTP status (100-599)")
        out.append(code)
    if not out:
        raise ModuleError("module 'uri': status_code is an empty list; give at least one accepted code")
    return out


def lookup(doc: object, dotted: str) -> object:
    """The value at a dotted key ("data.0.id": list items by index), or _MISSING."""
    cur = doc
    for part in dotted.split("."):
        if isinstance(cur, dict) and part in cur:
            cur = cur[part]
        elif isinstance(cur, list) and part.lstrip("-").isdigit() and -len(cur) <= int(part) < len(cur):
            cur = cur[int(part)]
        else:
            return _MISSING
    return cur


def json_problems(doc: object, expected: dict) -> list[str]:
    """One line per expected key that is missing or holds another value."""
    problems = []
    for key, want in expected.items():
        have = lookup(doc, str(key))
        if have is _MISSING:
            problems.append(f"{key} is missing")
        elif have != want or isinstance(have, bool) != isinstance(want, bool):
            problems.append(f"{key} is {json.dumps(have)[:200]}, expected {json.dumps(want)[:200]}")
    return problems


def send(url: str, method: str, headers: dict, data: bytes | None, timeout: float, verify: bool) -> tuple[int, dict, bytes]:
    """(status, headers, body); an HTTP error status is an answer, not an exception."""
    req = urllib.request.Request(url, data=data, headers=headers, method=method)  # noqa: S310 - run() allows http(s) only
    context = None
    if url.lower().startswith("https:") and not verify:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=context) as resp:  # noqa: S310 - http(s) only, checked in run()
            return resp.status, dict(resp.headers.items()), resp.read()
    except urllib.error.HTTPError as exc:
        try:
            body = exc.read()
        except OSError:
            body = b""
        return exc.code, dict(exc.headers.items()) if exc.headers else {}, body
    except urllib.error.URLError as exc:
        reason = exc.reason
        if isinstance(reason, socket.timeout):
            raise ModuleError(f"{method} {redact_url(url)}: no answer within {timeout} s (timeout_s)")
        raise ModuleError(
            f"{method} {redact_url(url)}: cannot connect: {getattr(reason, 'strerror', None) or reason}; "
            f"is the server running and the URL right?"
        )
    except socket.timeout:
        raise ModuleError(f"{method} {redact_url(url)}: no answer within {timeout} s (timeout_s)")
    except (ConnectionError, OSError) as exc:
        raise ModuleError(f"{method} {redact_url(url)}: connection failed: {exc}")


def run(args: dict, ctx: Context) -> dict:
    url, method = args["url"], args["method"].upper()
    if urllib.parse.urlsplit(url).scheme.lower() not in ("http", "https") or not urllib.parse.urlsplit(url).netloc:
        raise ModuleError(f"module 'uri': url {redact_url(url)!r} is not an http:// or https:// URL; write it in full")
    if not method.isalpha():
        raise ModuleError(f"module 'uri': method {args['method']!r} is not an HTTP method (GET, POST, PUT, ...)")
    codes = parse_status_codes(args["status_code"])
    if args["body"] is not None and args["json"] is not None:
        raise ModuleError("module 'uri': give either 'body' (text) or 'json' (a mapping or list), not both")
    headers = {str(k): str(v) for k, v in (args["headers"] or {}).items()}
    data = None
    if args["json"] is not None:
        if not isinstance(args["json"], (dict, list)):
            raise ModuleError(
                f"module 'uri': 'json' must be a mapping or a list, got {type(args['json']).__name__}; use 'body' for text"
            )
        data = json.dumps(args["json"]).encode("utf-8")
        if not any(k.lower() == "content-type" for k in headers):
            headers["Content-Type"] = "application/json"
    elif args["body"] is not None:
        data = args["body"].encode("utf-8")
    mutating = method not in READ_ONLY and args["mutating"]
    shown_url = redact_url(url)
    base = {"url": shown_url, "method": method, "request_headers": redact_headers(headers)}
    if ctx.check and mutating:
        return {
            **base,
            "status": None,
            "changed": True,
            "msg": f"check mode: would send {method} {shown_url} (not sent: mutating)",
        }

    start = time.monotonic()
    status, resp_headers, raw = send(url, method, headers, data, args["timeout_s"], args["validate_certs"])
    elapsed = round(time.monotonic() - start, 3)
    text = raw.decode("utf-8", errors="replace")
    result = {**base, "status": status, "headers": redact_headers(resp_headers), "elapsed_s": elapsed}
    doc = _MISSING
    if args["return_content"] or args["expect_json"]:
        try:
            doc = json.loads(text) if text.strip() else _MISSING
        except ValueError:
            doc = _MISSING
    if args["return_content"]:
        result["content"] = text if len(raw) <= CONTENT_LIMIT else raw[:CONTENT_LIMIT].decode("utf-8", errors="replace")
        if len(raw) > CONTENT_LIMIT:
            result["content_truncated_bytes"] = len(raw) - CONTENT_LIMIT
        result["json"] = None if doc is _MISSING else doc
    quote = text.strip()[:QUOTE_LIMIT]
    if status not in codes:
        raise ModuleError(
            f"{method} {shown_url} answered {status}, expected {' or '.join(map(str, codes))}"
            + (f"; body starts: {quote}" if quote else " with an empty body"),
            **result,
        )
    if args["expect_json"]:
        if doc is _MISSING:
            raise ModuleError(
                f"{method} {shown_url} answered {status} but the body is not JSON, so expect_json cannot be "
                f"checked; body starts: {quote or '(empty)'}",
                **result,
            )
        problems = json_problems(doc, args["expect_json"])
        if problems:
            raise ModuleError(
                f"{method} {shown_url}: the JSON answer does not match expect_json: {'; '.join(problems)}",
                **result,
            )
    result.update(changed=mutating, msg=f"{method} {shown_url}: {status} in {elapsed} s")
    return result


if __name__ == "__main__":
    main(ARGS, run)
