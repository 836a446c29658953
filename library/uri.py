"""Make an HTTP request and check its status and, optionally, fields of its JSON answer.

No role or playbook uses it (vllm_server probes the server itself) and the benchmark does not either:
it is a general module for user playbooks (tests/engine/run/test_general_modules_play.py runs it).

Takes ansible.builtin.uri's options (its aliases user and password too) and returns its fields: `status`,
`url` (where the answer came from, after redirects), `redirected`, `elapsed` (whole seconds), `msg` ("OK (N
bytes)" from Content-Length, Ansible's words on an error status), every response header lower-cased with `-` as
`_` (`content_type`, `location` made absolute, ...), `json` when the answer's Content-Type is JSON, `content`
with return_content. A status outside status_code fails with "Status code was N and not [...]: ..." (ours then
quotes the body's start). body_format json or form-urlencoded encodes a mapping body (and sets Content-Type),
follow_redirects safe (GET/HEAD only), all, none or urllib2 decides redirects as Ansible's handler does,
url_username/url_password send basic (or digest) auth after a 401 challenge, at once with force_basic_auth;
creates/removes skip the request as Ansible's ("skipped, since 'P' exists"). Options of Ansible's not listed
in ARGS (dest, src, unix_socket, ca_path, client_cert, ciphers, form-multipart, ...) are refused when the playbook
loads.

Ours beside Ansible's: `json` (a request body as JSON), `expect_json` ({dotted.key: value} checked in the
answer), `mutating` (a request with another method than GET/HEAD counts as a change only then, and such a
request is not sent in check mode; Ansible skips uri in check mode), `timeout_s` (alias of timeout), and the
fields `method`, `headers` (the response's), `request_headers`, `elapsed_s` (float).
Secrets: headers that look secret (Authorization, Cookie, Set-Cookie, *token*, *key*, *secret*, *password*) are
never echoed in the result, user and password in the URL are masked as Ansible's (`****:****@`), url_password
never appears in a result or message; Ansible's `cookies` / `cookies_string` are not returned (secrets).
`content` is cut at 1 MiB. Ansible reads ~/.netrc (use_netrc); ours does not (use_netrc takes false only).
"""

from __future__ import annotations

import base64
import gzip
import http.client
import http.cookiejar
import json
import os
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
    "body": {
        "type": "raw",
        "default": None,
        "help": "request body: text, or with body_format json / form-urlencoded a mapping (or list) to encode",
    },
    "body_format": {
        "type": "str",
        "default": "raw",
        "choices": ["raw", "json", "form-urlencoded"],
        "help": "json: body encoded as JSON (a text body is sent as it is), Content-Type application/json; "
        "form-urlencoded: a mapping body as key=value&..., Content-Type application/x-www-form-urlencoded",
    },
    "json": {"type": "raw", "default": None, "help": "request body as JSON (a mapping or list); sets Content-Type"},
    "status_code": {"type": "raw", "default": [200], "help": "accepted status code(s): an int or a list"},
    "timeout": {"type": "float", "default": 30.0, "help": "give up on a response after this many seconds"},
    "timeout_s": {"type": "float", "default": None, "alias_of": "timeout", "help": "alias of timeout"},
    "follow_redirects": {
        "type": "str",
        "default": "safe",
        "choices": ["safe", "all", "none", "urllib2", "yes", "no"],
        "help": "safe: follow redirects of GET and HEAD only; all: of every method; none: never (the 3xx is the "
        "answer); urllib2: as Python's urllib; yes and no: all and none (deprecated in Ansible)",
    },
    "url_username": {"type": "str", "default": None, "help": "user for basic (or digest) auth"},
    "user": {"type": "str", "default": None, "alias_of": "url_username", "help": "alias of url_username"},
    "url_password": {"type": "str", "default": None, "help": "password for basic (or digest) auth; never shown"},
    "password": {"type": "str", "default": None, "alias_of": "url_password", "help": "alias of url_password"},
    "force_basic_auth": {
        "type": "bool",
        "default": False,
        "help": "send basic auth with the first request (else only after the server's 401 challenge)",
    },
    "http_agent": {"type": "str", "default": "ansible-httpget", "help": "the User-Agent header"},
    "force": {"type": "bool", "default": False, "help": "send Cache-Control: no-cache"},
    "use_proxy": {"type": "bool", "default": True, "help": "use the proxy of the environment (http_proxy, ...)"},
    "use_netrc": {
        "type": "bool",
        "default": False,
        "choices": [False],
        "help": "false only: ~/.netrc is never read (Ansible's default reads it)",
    },
    "use_gssapi": {"type": "bool", "default": False, "choices": [False], "help": "false only: no GSSAPI auth"},
    "unredirected_headers": {
        "type": "list",
        "default": None,
        "help": "names of request headers not sent again on a redirect",
    },
    "decompress": {"type": "bool", "default": True, "help": "decode a gzip Content-Encoding answer"},
    "creates": {"type": "path", "default": None, "help": "skip the request when this path exists"},
    "removes": {"type": "path", "default": None, "help": "skip the request when this path does not exist"},
    "return_content": {
        "type": "bool",
        "default": False,
        "help": "put the body in the result as content (json comes with a JSON Content-Type anyway)",
    },
    "validate_certs": {"type": "bool", "default": True, "help": "check the server's TLS certificate"},
    "expect_json": {
        "type": "dict",
        "default": None,
        "help": '{dotted.key: expected value} checked in the JSON answer ("data.0.id": "target")',
    },
    "mutating": {
        "type": "bool",
        "default": False,
        "help": "the request changes the server: report changed, and do not send it in check mode",
    },
}
# The arguments that decide what runs or which file, folder or address is touched: never built from what a
# host returned when the task runs on the control node (engine/run/trust.py).
CODE_ARGS = ("url", "creates", "removes")

CONTENT_LIMIT = 1024 * 1024  # bytes of the body kept in the result
QUOTE_LIMIT = 500  # characters of the body quoted in a failure message
SECRET_WORDS = ("authorization", "cookie", "token", "key", "secret", "password")
READ_ONLY = ("GET", "HEAD")
JSON_CANDIDATES = ("json", "javascript")  # Ansible's: a Content-Type whose subtype (or +suffix) is one of these
REDACTED = "<redacted>"
NO_LOG_MASK = "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER"  # what Ansible writes where url_password would be
_MISSING = object()


def is_secret_header(name: str) -> bool:
    low = name.lower()
    return any(word in low for word in SECRET_WORDS)


def redact_headers(headers: dict) -> dict:
    return {k: (REDACTED if is_secret_header(k) else v) for k, v in headers.items()}


def mask_url(url: str) -> str:
    """The URL with its user-info masked as Ansible's mask_url does (`****:****@` or `****@`)."""
    parts = urllib.parse.urlparse(url)
    if not parts.username and not parts.password:
        return url
    if parts.password:
        netloc = parts.netloc.replace(f"{parts.username}:{parts.password}@", "****:****@")
    else:
        netloc = parts.netloc.replace(f"{parts.username}@", "****@")
    return urllib.parse.urlunparse(parts._replace(netloc=netloc))


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


def form_urlencoded(body: object) -> str:
    """Ansible's form_urlencoded: a mapping or a list of pairs as key=value&...; a list value repeats its key."""
    if isinstance(body, str):
        return body
    if isinstance(body, dict):
        pairs = list(body.items())
    elif isinstance(body, (list, tuple)):
        pairs = list(body)
    else:
        raise ModuleError(
            f"failed to parse body as form_urlencoded: cannot form-urlencode body, expect list or dict "
            f"(got {type(body).__name__})"
        )
    out = []
    for pair in pairs:
        try:
            key, values = pair
        except (TypeError, ValueError):
            raise ModuleError(f"failed to parse body as form_urlencoded: {pair!r} is not a (key, value) pair")
        if isinstance(values, str) or not isinstance(values, (dict, list, tuple)):
            values = [values]
        out += [(str(key), str(v)) for v in values if v is not None]
    return urllib.parse.urlencode(out, doseq=True)


def encode_body(args: dict, headers: dict) -> bytes | None:
    """The request's bytes from body / body_format / json; Content-Type set as Ansible sets it."""
    body, fmt = args["body"], args["body_format"]
    if args["json"] is not None:
        if body is not None:
            raise ModuleError("module 'uri': give either 'body' (with body_format) or 'json' (a mapping or list), not both")
        if not isinstance(args["json"], (dict, list)):
            raise ModuleError(
                f"module 'uri': 'json' must be a mapping or a list, got {type(args['json']).__name__}; use 'body' for text"
            )
        if fmt == "form-urlencoded":
            raise ModuleError("module 'uri': 'json' sends JSON; leave body_format out (or json) with it")
        body, fmt = args["json"], "json"
    has_type = any(k.lower() == "content-type" for k in headers)
    if fmt == "json":
        if not has_type:
            headers["Content-Type"] = "application/json"
        if body is None:
            return None
        return (body if isinstance(body, str) else json.dumps(body)).encode("utf-8")
    if fmt == "form-urlencoded":
        if not has_type:
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        return None if body is None else form_urlencoded(body).encode("utf-8")
    if body is None:
        return None
    if isinstance(body, (dict, list)):
        raise ModuleError(
            f"module 'uri': body is a {type(body).__name__} but body_format is raw; set body_format: json (or "
            f"form-urlencoded) to encode it, or give text"
        )
    return (body if isinstance(body, str) else json.dumps(body)).encode("utf-8")


class RedirectHandler(urllib.request.HTTPRedirectHandler):
    """Ansible's HTTPRedirectHandler: follow_redirects decides which redirects are followed, and how."""

    def __init__(self, follow: str) -> None:
        super().__init__()
        self.follow = follow

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        follow = self.follow
        if follow == "urllib2":
            return urllib.request.HTTPRedirectHandler.redirect_request(self, req, fp, code, msg, headers, newurl)
        if follow in ("no", "none"):
            raise urllib.error.HTTPError(newurl, code, msg, headers, fp)
        method = req.get_method()
        if code < 300 or code >= 400 or (follow == "safe" and method not in READ_ONLY):
            raise urllib.error.HTTPError(req.get_full_url(), code, msg, headers, fp)
        if urllib.parse.urlsplit(newurl).scheme.lower() not in ("http", "https"):  # never file:// or ftp://
            raise urllib.error.HTTPError(newurl, code, f"{msg} (a redirect to {newurl!r} is not followed)", headers, fp)
        data = req.data
        newurl = newurl.replace(" ", "%20")
        if code in (307, 308):  # the payload and the headers go along
            req_headers = dict(req.headers)
        else:
            data = None
            req_headers = {k: v for k, v in req.headers.items()
                           if k.lower() not in ("content-length", "content-type", "transfer-encoding")}
            if code in (302, 303) and method != "HEAD":
                method = "GET"
            if code == 301 and method == "POST":
                method = "GET"
        return urllib.request.Request(newurl, data=data, headers=req_headers,  # noqa: S310 - http(s), checked above
                                      origin_req_host=req.origin_req_host, unverifiable=True, method=method.upper())


if not hasattr(urllib.request.HTTPRedirectHandler, "http_error_308"):  # Python < 3.11 does not follow a 308
    RedirectHandler.http_error_308 = urllib.request.HTTPRedirectHandler.http_error_302


def credentials(url: str, args: dict) -> tuple[str, str | None, str | None]:
    """(url without user-info, user, password): url_username wins; else the URL's user-info, as Ansible's."""
    user, password = args["url_username"], args["url_password"]
    parts = urllib.parse.urlparse(url)
    if not user and "@" in parts.netloc:
        userinfo, netloc = parts.netloc.split("@", 1)
        user, _, pw = userinfo.partition(":")
        user, password = urllib.parse.unquote(user), urllib.parse.unquote(pw)
        url = urllib.parse.urlunparse(parts._replace(netloc=netloc))
    return url, user or None, password


def build_opener(url: str, user: str | None, password: str | None, args: dict,
                 headers: dict) -> urllib.request.OpenerDirector:
    handlers: list = []
    if user and not args["force_basic_auth"]:
        manager = urllib.request.HTTPPasswordMgrWithDefaultRealm()
        manager.add_password(None, urllib.parse.urlparse(url).netloc, user, password or "")
        handlers += [urllib.request.HTTPBasicAuthHandler(manager), urllib.request.HTTPDigestAuthHandler(manager)]
    elif user:
        token = base64.b64encode(f"{user}:{password or ''}".encode()).decode("ascii")
        headers["Authorization"] = f"Basic {token}"
    if not args["use_proxy"]:
        handlers.append(urllib.request.ProxyHandler({}))
    context = ssl.create_default_context()
    if not args["validate_certs"]:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    handlers.append(urllib.request.HTTPSHandler(context=context))
    handlers.append(RedirectHandler(args["follow_redirects"]))
    handlers.append(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))  # cookies set on a redirect go on
    return urllib.request.build_opener(*handlers)


def header_dict(message: object) -> dict:
    """A response's headers, a repeated one joined with ', ' (as Ansible's fetch_url)."""
    out: dict = {}
    for name, value in getattr(message, "items", list)():
        out[name] = f"{out[name]}, {value}" if name in out else value
    return out


def send(url: str, method: str, headers: dict, data: bytes | None, args: dict,
         user: str | None, password: str | None) -> dict:
    """The answer: {status, url, headers, body, info_msg}; status -1 and info_msg when none came (Ansible's words)."""
    timeout = args["timeout"]
    req = urllib.request.Request(url, data=data, method=method)  # noqa: S310 - run() allows http(s) only
    if args["http_agent"]:
        req.add_header("User-agent", args["http_agent"])
    if args["force"]:
        req.add_header("cache-control", "no-cache")
    opener = build_opener(url, user, password, args, headers)
    unredirected = {str(h).lower() for h in args["unredirected_headers"] or []}
    for name, value in headers.items():
        (req.add_unredirected_header if name.lower() in unredirected else req.add_header)(name, value)
    answer: dict = {"status": -1, "url": url, "headers": {}, "body": b""}
    resp = None
    try:
        resp = opener.open(req, timeout=timeout)
        answer.update(status=resp.status, url=resp.geturl(), headers=header_dict(resp.headers))
        answer["info_msg"] = f"OK ({resp.headers.get('Content-Length', 'unknown')} bytes)"
    except urllib.error.HTTPError as exc:
        resp = exc
        answer.update(status=exc.code, headers=header_dict(exc.headers), info_msg=str(exc), error=True)
    except urllib.error.URLError as exc:
        answer["info_msg"] = f"Request failed: {exc}"
        answer["timed_out"] = isinstance(exc.reason, socket.timeout)
        answer["refused"] = isinstance(exc.reason, ConnectionRefusedError)
        return answer
    except http.client.BadStatusLine as exc:
        answer["info_msg"] = f"Connection failure: connection was closed before a valid response was received: {exc.line}"
        return answer
    except (OSError, http.client.HTTPException) as exc:
        answer["info_msg"] = f"Connection failure: {exc}"
        answer["timed_out"] = isinstance(exc, socket.timeout)
        return answer
    except ValueError as exc:
        answer["info_msg"] = str(exc)
        return answer
    try:
        body = resp.read() if method != "HEAD" else b""
    except (OSError, http.client.HTTPException) as exc:
        answer.update(status=-1, info_msg=f"HTTP Error while fetching {mask_url(url)}: {exc}",
                      timed_out=isinstance(exc, socket.timeout))
        return answer
    finally:
        resp.close()
    if args["decompress"] and str(answer["headers"].get("Content-Encoding", "")).lower() == "gzip" and body:
        try:
            body = gzip.decompress(body)
        except (OSError, EOFError) as exc:
            raise ModuleError(f"{method} {mask_url(url)}: the answer says gzip but does not decode ({exc}); "
                              f"set decompress: false to keep the bytes")
    answer["body"] = body
    return answer


def content_type(headers: dict) -> tuple[str, str]:
    """(the answer's media type, its charset) as Ansible's parse_content_type reads them."""
    message = http.client.HTTPMessage()
    for k, v in headers.items():
        message[k] = v
    charset = (message.get_param("charset") or "utf-8")
    return message.get_content_type().split(",")[0], str(charset).split(",")[0]


def is_json_type(media: str) -> bool:
    sub = media.partition("/")[2]
    if "+" in sub:
        sub = sub.partition("+")[2]
    return sub.lower() in JSON_CANDIDATES


def scrub(value: object, secret: str | None) -> object:
    """value with every occurrence of the password replaced by the mask (Ansible's no_log values)."""
    if not secret:
        return value
    if isinstance(value, str):  # a password under 4 characters only where it is the whole text (as the engine's masks)
        return value.replace(secret, NO_LOG_MASK) if len(secret) >= 4 or value == secret else value
    if isinstance(value, dict):
        return {scrub(k, secret): scrub(v, secret) for k, v in value.items()}
    if isinstance(value, list):
        return [scrub(v, secret) for v in value]
    return value


def without_msg(result: dict) -> dict:
    """The result's fields for a ModuleError (whose msg is its own)."""
    return {k: v for k, v in result.items() if k != "msg"}


def checked_method(args: dict) -> tuple[str, str]:
    """(the method upper-cased, the URL as results show it): a URL that is not http(s) or a method that is not
    one word is refused before anything else is read, with the fix."""
    raw_url, method = args["url"], args["method"].upper()
    shown_url = mask_url(raw_url)
    parts = urllib.parse.urlsplit(raw_url)
    if parts.scheme.lower() not in ("http", "https") or not parts.netloc:
        raise ModuleError(f"module 'uri': url {shown_url!r} is not an http:// or https:// URL; write it in full")
    if not method.isalpha() or not method.isascii():
        raise ModuleError("Parameter 'method' needs to be a single word in uppercase, like GET or POST. "
                          f"(module 'uri': it is {args['method']!r})")
    return method, shown_url


def skipped_by_path(args: dict) -> dict | None:
    """Ansible's creates/removes: the result of a request not sent because a path exists (or does not)."""
    for path, want, words in ((args["creates"], True, "exists"), (args["removes"], False, "does not exist")):
        if path is not None and os.path.exists(path) == want:
            said = f"skipped, since '{path}' {words}"
            return {"changed": False, "stdout": said, "stdout_lines": [said], "msg": said}
    return None


def answer_fields(answer: dict, base: dict, url: str, final_url: str, elapsed_s: float) -> dict:
    """The result's fields about the answer: its headers as Ansible names them (secret ones masked, location made
    absolute), then the request's, the status, where it came from and how long it took."""
    result: dict = {key.replace("-", "_").lower(): (REDACTED if is_secret_header(key) else value)
                    for key, value in answer["headers"].items()}
    if "location" in result and result["location"] != REDACTED:
        result["location"] = urllib.parse.urljoin(final_url, result["location"])
    result.update(base)
    result.update(status=answer["status"], url=final_url, redirected=answer["url"] != url, elapsed=int(elapsed_s),
                  elapsed_s=elapsed_s, headers=redact_headers(answer["headers"]), msg=answer["info_msg"])
    return result


def decoded_body(answer: dict, expect_json: object) -> tuple[str, str, str, object]:
    """(text, media type, charset, JSON document or _MISSING): the body read in the answer's charset (utf-8 where
    Python does not know it), parsed as JSON where its type says JSON or expect_json is to be checked."""
    media, charset = content_type(answer["headers"])
    try:
        text = answer["body"].decode(charset, errors="replace")
    except LookupError:
        text = answer["body"].decode("utf-8", errors="replace")
    doc = _MISSING
    if text.strip() and (is_json_type(media) or expect_json):
        try:
            doc = json.loads(text)
        except ValueError:
            doc = _MISSING
    return text, media, charset, doc


def body_fields(answer: dict, text: str, media: str, charset: str, doc: object, accepted: bool,
                return_content: bool) -> dict:
    """The result's fields from the body, as Ansible fills them: json, body (an accepted error status's body it
    does not read as content), content (cut at CONTENT_LIMIT, with what was cut)."""
    raw = answer["body"]
    out: dict = {}
    if doc is not _MISSING and is_json_type(media):
        out["json"] = doc
    if answer.get("error") and accepted and not return_content and not is_json_type(media):
        out["body"] = text
    if return_content:
        out["content"] = text if len(raw) <= CONTENT_LIMIT else raw[:CONTENT_LIMIT].decode(charset, errors="replace")
        if len(raw) > CONTENT_LIMIT:
            out["content_truncated_bytes"] = len(raw) - CONTENT_LIMIT
    return out


def status_refusal(answer: dict, codes: list[int], quote: str, timeout: object, secret: str | None) -> str | None:
    """Why a status outside status_code fails the task: Ansible's words, then what helps (the timeout, a server
    that is not there, the body's start); None for an accepted status."""
    status = answer["status"]
    if status in codes:
        return None
    said = f"Status code was {status} and not {codes}: {scrub(answer['info_msg'], secret)}"
    if status == -1:
        if answer.get("timed_out"):
            said += f"; no answer within {timeout} s (timeout)"
        elif answer.get("refused"):
            said += "; is the server running and the URL right?"
    else:
        said += f"; body starts: {quote}" if quote else "; the body is empty"
    return said


def expect_json_refusal(doc: object, expected: dict, method: str, final_url: str, status: int, quote: str,
                        secret: str | None) -> str | None:
    """Why the answer fails expect_json (not JSON, or fields that differ); None when it matches."""
    if doc is _MISSING:
        return (f"{method} {final_url} answered {status} but the body is not JSON, so expect_json cannot be "
                f"checked; body starts: {quote or '(empty)'}")
    problems = json_problems(doc, expected)
    if problems:
        return str(scrub(f"{method} {final_url}: the JSON answer does not match expect_json: {'; '.join(problems)}",
                         secret))
    return None


def run(args: dict, ctx: Context) -> dict:
    method, shown_url = checked_method(args)
    codes = parse_status_codes(args["status_code"])
    headers = {str(k): str(v) for k, v in (args["headers"] or {}).items()}
    data = encode_body(args, headers)
    url, user, password = credentials(args["url"], args)
    secret = password or None
    mutating = method not in READ_ONLY and args["mutating"]
    skipped = skipped_by_path(args)
    if skipped is not None:
        return skipped
    base = {"url": shown_url, "method": method, "request_headers": redact_headers(headers), "redirected": False}
    if ctx.check and mutating:
        return {**base, "status": None, "changed": True,
                "msg": f"check mode: would send {method} {shown_url} (not sent: mutating)"}

    start = time.monotonic()
    answer = send(url, method, headers, data, args, user, password)
    elapsed_s = round(time.monotonic() - start, 3)
    status = answer["status"]
    final_url = mask_url(answer["url"]) if status != -1 else shown_url
    result = answer_fields(answer, base, url, final_url, elapsed_s)
    text, media, charset, doc = decoded_body(answer, args["expect_json"])
    result.update(body_fields(answer, text, media, charset, doc, status in codes, args["return_content"]))
    result = {key: scrub(value, secret) for key, value in result.items()}
    quote = str(scrub(text.strip()[:QUOTE_LIMIT], secret))
    refusal = status_refusal(answer, codes, quote, args["timeout"], secret)
    if refusal is None and args["expect_json"]:
        refusal = expect_json_refusal(doc, args["expect_json"], method, final_url, status, quote, secret)
    if refusal is not None:
        raise ModuleError(refusal, **without_msg(result))
    result["changed"] = mutating
    return result


if __name__ == "__main__":
    main(ARGS, run)
