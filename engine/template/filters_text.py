"""Ansible's filters on text: base64, JSON and YAML, hashes, regular expressions, split, comment, to_uuid, urlsplit,
quote, with ansible-core 2.19's semantics, for the sandbox (engine/template/environment.py).

A secret passed through any of them stays a secret: the render that read it is a secret's (engine/template/taint.py),
so what it gives (a base64 text, a hash, a YAML dump) joins the run's secrets and is masked wherever shown.
from_yaml reads text a host may have returned: the safe loader, with the bounds of every YAML file the engine reads
(engine/parsing/yamlfile.py: size, nesting, expanded aliases)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
import shlex
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit as _urlsplit

import yaml

from engine.errors import TaskError, UserError
from engine.parsing import yamlfile
from engine.template.bounds import refuse_text

_UUID_NAMESPACE = uuid.UUID("361E6D51-FAEC-444A-9079-341386DA8E2E")  # ansible-core's, so to_uuid gives its UUIDs
_YAML_OPTIONS = frozenset({"indent", "width", "sort_keys", "explicit_start", "explicit_end", "default_style",
                           "canonical", "line_break", "allow_unicode", "default_flow_style"})


def _fail(name: str, what: str) -> TaskError:
    return TaskError(f"the {name} filter: {what}")


def _text(value: Any) -> str:
    """A value as text, as Ansible's to_text does for filters (str() of what is not text)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogateescape")
    return value if isinstance(value, str) else str(value)


def _bytes(value: Any, encoding: str = "utf-8") -> bytes:
    return value if isinstance(value, bytes) else _text(value).encode(encoding, "surrogateescape")


# -- base64 -------------------------------------------------------------------------------------------------------


def b64encode(value: Any, encoding: str = "utf-8", urlsafe: bool = False) -> str:
    encode = base64.urlsafe_b64encode if urlsafe else base64.b64encode
    return encode(_bytes(value, encoding)).decode("ascii")


def b64decode(value: Any, encoding: str = "utf-8", urlsafe: bool = False) -> str:
    decode = base64.urlsafe_b64decode if urlsafe else base64.b64decode
    try:
        raw = decode(_bytes(value))
    except (binascii.Error, ValueError) as exc:
        raise _fail("b64decode", f"the text is not base64 ({exc})") from None
    return raw.decode(encoding, "replace")


# -- JSON and YAML ----------------------------------------------------------------------------------------------------


def to_json(value: Any, **options: Any) -> str:
    try:
        return json.dumps(value, **_json_options(options))
    except (TypeError, ValueError) as exc:
        raise _fail("to_json", str(exc)) from None


def to_nice_json(value: Any, indent: int = 4, sort_keys: bool = True, **options: Any) -> str:
    options.pop("separators", None)
    return to_json(value, indent=indent, sort_keys=sort_keys, separators=(",", ": "), **options)


def _json_options(options: dict) -> dict:
    allowed = {"indent", "sort_keys", "separators", "ensure_ascii", "allow_nan", "skipkeys"}
    unknown = sorted(set(options) - allowed - {"vault_to_text", "preprocess_unsafe", "profile"})
    if unknown:
        raise _fail("to_json", f"it has no option {', '.join(unknown)} (its options: {', '.join(sorted(allowed))})")
    if isinstance(options.get("indent"), int):
        refuse_text(options["indent"], "to_json's indent")
    return {k: v for k, v in options.items() if k in allowed}


class _Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    """The safe dumper, with any mapping a mapping and any tuple or set a list (as Ansible's dumper)."""


_Dumper.add_multi_representer(Mapping, _Dumper.represent_dict)
_Dumper.add_representer(tuple, _Dumper.represent_list)
_Dumper.add_representer(set, lambda d, v: d.represent_list(sorted(v, key=repr)))


def to_yaml(value: Any, *_args: Any, default_flow_style: bool | None = None, **options: Any) -> str:
    unknown = sorted(set(options) - _YAML_OPTIONS)
    if unknown:
        raise _fail("to_yaml", f"it has no option {', '.join(unknown)} (its options: {', '.join(sorted(_YAML_OPTIONS))})")
    for key in ("indent", "width"):
        if isinstance(options.get(key), int):
            refuse_text(options[key], f"to_yaml's {key}")
    options.setdefault("allow_unicode", True)
    try:
        return yaml.dump(value, Dumper=_Dumper, default_flow_style=default_flow_style, **options)
    except yaml.YAMLError as exc:
        raise _fail("to_yaml", str(exc)) from None


def to_nice_yaml(value: Any, indent: int = 4, *_args: Any, default_flow_style: bool = False, **options: Any) -> str:
    return to_yaml(value, indent=indent, default_flow_style=default_flow_style, **options)


_FROM_YAML = Path("<from_yaml>")


def from_yaml(value: Any) -> Any:
    """YAML text as data (None stays None; a value that is not text is given back, as Ansible does)."""
    if not isinstance(value, str):
        return value
    try:
        return yamlfile.parse_text(value, _FROM_YAML, "text given to from_yaml")
    except UserError as exc:
        raise _fail("from_yaml", str(exc)) from None


def from_yaml_all(value: Any) -> Any:
    """Each YAML document of the text, as a list (None is []), under the same bounds as from_yaml."""
    if value is None:
        return []
    if not isinstance(value, str):
        return value
    what = "text given to from_yaml_all"
    try:
        return _documents(value, what)
    except UserError as exc:
        raise _fail("from_yaml_all", str(exc)) from None
    except yaml.YAMLError as exc:
        raise _fail("from_yaml_all", f"malformed YAML: {exc}") from None


def _documents(text: str, what: str) -> list:
    """The documents of a YAML stream, each checked as yamlfile.parse_text checks one (its private helpers: the
    checks must be the same)."""
    if yamlfile._nesting_bound(text) > yamlfile._C_COMPOSER_SAFE_DEPTH or yamlfile._values_bound(text) > yamlfile.MAX_YAML_NODES:
        yamlfile._check_events(text, _FROM_YAML, what)
    loader = yamlfile._Loader(text)
    loader.dfp_path = _FROM_YAML
    out, values = [], 0
    try:
        while loader.check_node():
            node = loader.get_node()
            values += yamlfile._check_node_graph(node, _FROM_YAML, what)
            if values > yamlfile.MAX_YAML_NODES:
                raise UserError(f"{_FROM_YAML}: {what} holds more than {yamlfile.MAX_YAML_NODES:,} values")
            out.append(loader.construct_document(node))
    finally:
        loader.dispose()
    return out


# -- hashes ---------------------------------------------------------------------------------------------------------


def hash_(value: Any, hashtype: str = "sha1") -> str:
    if hashtype not in hashlib.algorithms_available:
        raise _fail("hash", f"no hash named {hashtype!r} (these are: {', '.join(sorted(hashlib.algorithms_available))})")
    return hashlib.new(hashtype, _bytes(value)).hexdigest()


def md5(value: Any) -> str:
    return hash_(value, "md5")


def sha1(value: Any) -> str:
    return hash_(value, "sha1")


def to_uuid(value: Any, namespace: Any = _UUID_NAMESPACE) -> str:
    try:
        space = namespace if isinstance(namespace, uuid.UUID) else uuid.UUID(str(namespace))
    except ValueError as exc:
        raise _fail("to_uuid", f"the namespace {namespace!r} is not a UUID ({exc})") from None
    return str(uuid.uuid5(space, _text(value)))


# -- regular expressions ---------------------------------------------------------------------------------------------


def _flags(ignorecase: bool, multiline: bool) -> int:
    return (re.I if ignorecase else 0) | (re.M if multiline else 0)


def _compile(name: str, pattern: Any, flags: int) -> re.Pattern:
    try:
        return re.compile(_text(pattern), flags)
    except re.error as exc:
        raise _fail(name, f"the pattern {pattern!r} is not a regular expression: {exc}") from None


def regex_replace(value: Any = "", pattern: Any = "", replacement: Any = "", ignorecase: bool = False,
                  multiline: bool = False, count: int = 0, mandatory_count: int = 0) -> str:
    text = _text(value)
    try:
        out, made = _compile("regex_replace", pattern, _flags(ignorecase, multiline)).subn(_text(replacement), text, count=count)
    except (re.error, IndexError) as exc:
        raise _fail("regex_replace", f"the replacement {replacement!r} does not fit the pattern: {exc}") from None
    if mandatory_count and mandatory_count != made:
        raise _fail("regex_replace", f"{pattern!r} should match {mandatory_count} times, and matches {made} times")
    refuse_text(len(out), "regex_replace")
    return out


def regex_search(value: Any, pattern: Any, *groups: Any, ignorecase: bool = False, multiline: bool = False) -> Any:
    """The first match's text, or with '\\1' / '\\g<name>' arguments the list of those groups; None without a match."""
    wanted: list = []
    for g in groups:
        named, numbered = re.fullmatch(r"\\g<(\S+)>", str(g)), re.fullmatch(r"\\(\d+)", str(g))
        if named:
            wanted.append(named.group(1))
        elif numbered:
            wanted.append(int(numbered.group(1)))
        else:
            raise _fail("regex_search", f"a group argument is written '\\\\1' or '\\\\g<name>', not {g!r}")
    match = _compile("regex_search", pattern, _flags(ignorecase, multiline)).search(_text(value))
    if match is None:
        return None
    try:
        return [match.group(g) for g in wanted] if wanted else match.group()
    except (IndexError, re.error) as exc:
        raise _fail("regex_search", f"no such group in {pattern!r}: {exc}") from None


def regex_findall(value: Any, pattern: Any, multiline: bool = False, ignorecase: bool = False) -> list:
    return _compile("regex_findall", pattern, _flags(ignorecase, multiline)).findall(_text(value))


def regex_escape(value: Any, re_type: str = "python") -> str:
    text = _text(value)
    if re_type == "python":
        return re.escape(text)
    if re_type == "posix_basic":
        return re.sub(r"([].[^$*\\])", r"\\\1", text)
    raise _fail("regex_escape", f"re_type is python or posix_basic, not {re_type!r}")


# -- the rest ---------------------------------------------------------------------------------------------------------


def split(value: Any, sep: Any = None, maxsplit: int = -1) -> list:
    return _text(value).split(sep, maxsplit)


def quote(value: Any) -> str:
    return shlex.quote("" if value is None else _text(value))


def urlsplit(value: Any, query: str = "") -> Any:
    parts = _urlsplit(_text(value))
    try:
        fields = {"fragment": parts.fragment, "hostname": parts.hostname, "netloc": parts.netloc,
                  "password": parts.password, "path": parts.path, "port": parts.port, "query": parts.query,
                  "scheme": parts.scheme, "username": parts.username}
    except ValueError as exc:
        raise _fail("urlsplit", f"{value!r} is not a URL: {exc}") from None
    if not query:
        return fields
    if query not in fields:
        raise _fail("urlsplit", f"unknown URL component: {query} (one of {', '.join(fields)})")
    return fields[query]


_COMMENT_STYLES = {
    "plain": {"decoration": "# "},
    "erlang": {"decoration": "% "},
    "c": {"decoration": "// "},
    "cblock": {"beginning": "/*", "decoration": " * ", "end": " */"},
    "xml": {"beginning": "<!--", "decoration": " - ", "end": "-->"},
}


def comment(text: Any, style: str = "plain", **options: Any) -> str:
    """Text as a comment block: a prefix line, each line decorated, a postfix line (Ansible's `comment`)."""
    if style not in _COMMENT_STYLES:
        raise _fail("comment", f"no style {style!r} (styles: {', '.join(_COMMENT_STYLES)})")
    mark = options.get("decoration", _COMMENT_STYLES[style]["decoration"])
    p = {"newline": "\n", "beginning": "", "prefix": mark.rstrip(), "prefix_count": 1, "decoration": "",
         "postfix": mark.rstrip(), "postfix_count": 1, "end": "", **_COMMENT_STYLES[style], **options}
    for key in ("prefix_count", "postfix_count"):
        refuse_text(int(p[key]), f"comment's {key}")
    nl, deco = p["newline"], p["decoration"]
    head = f"{p['beginning']}{nl}" if p["beginning"] else ""
    if p["prefix"]:
        head += (nl if p["prefix"] == nl else f"{p['prefix']}{nl}") * int(p["prefix_count"])
    body = (deco + _text(text).replace(nl, nl + deco)).replace(deco + nl, deco.rstrip() + nl)
    tail = nl.join([""] + [p["postfix"]] * int(p["postfix_count"]))
    end = f"{nl}{p['end']}" if p["end"] else ""
    return head + body + tail + end


FILTERS = {
    "b64encode": b64encode,
    "b64decode": b64decode,
    "to_json": to_json,
    "to_nice_json": to_nice_json,
    "from_json": json.loads,
    "to_yaml": to_yaml,
    "to_nice_yaml": to_nice_yaml,
    "from_yaml": from_yaml,
    "from_yaml_all": from_yaml_all,
    "hash": hash_,
    "md5": md5,
    "sha1": sha1,
    "checksum": sha1,
    "to_uuid": to_uuid,
    "regex_replace": regex_replace,
    "regex_search": regex_search,
    "regex_findall": regex_findall,
    "regex_escape": regex_escape,
    "split": split,
    "quote": quote,
    "urlsplit": urlsplit,
    "comment": comment,
}
