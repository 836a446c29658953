"""Ansible's path filters (path_join, splitext, realpath, relpath, normpath, commonpath, basename, dirname,
expanduser), with ansible-core 2.19's semantics: paths of the control node, as Ansible's, for the sandbox
(engine/template/environment.py). realpath and relpath read the control node's file system only to resolve a
path (symlinks, the working folder), never a file's contents."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from engine.errors import TaskError


def _text(value: Any) -> str:
    return value if isinstance(value, str) else str(value)


def path_join(paths: Any) -> str:
    """A list of path parts joined (a later absolute part starts over), as os.path.join."""
    if isinstance(paths, str):
        return paths
    if isinstance(paths, Sequence):
        if not paths:
            raise TaskError("the path_join filter: it needs at least one path part")
        return os.path.join(*(_text(p) for p in paths))
    raise TaskError(f"the path_join filter: it joins a string or a list of them, not a {type(paths).__name__}")


def commonpath(paths: Any) -> str:
    if isinstance(paths, str) or not isinstance(paths, Sequence):
        raise TaskError(f"the commonpath filter: it needs a list of paths, not a {type(paths).__name__}")
    try:
        return os.path.commonpath([_text(p) for p in paths])
    except ValueError as exc:
        raise TaskError(f"the commonpath filter: {exc}") from None


def splitext(value: Any) -> list:
    return list(os.path.splitext(_text(value)))


def relpath(value: Any, start: Any = os.curdir) -> str:
    return os.path.relpath(_text(value), _text(start))


FILTERS = {
    "path_join": path_join,
    "commonpath": commonpath,
    "splitext": splitext,
    "realpath": lambda v: os.path.realpath(_text(v)),
    "relpath": relpath,
    "normpath": lambda v: os.path.normpath(_text(v)),
    "basename": lambda v: os.path.basename(_text(v)),
    "dirname": lambda v: os.path.dirname(_text(v)),
    "expanduser": lambda v: os.path.expanduser(_text(v)),
}
