"""What a purge of the serving environments' folder (python_env state absent, teardown --purge) removes:
only what the tool provably made, each proven by its content (dflash_host/env/layout.py has the layout).

The environments whose marker names them or that the build journal records, `current` when it links into
envs/, the history when python_env wrote it, the lock with the tool's tag, and the wheelhouse the venv role
recorded pushing (.dfp-wheelhouse, written before the push). Everything else under root is left and named.
"""

from __future__ import annotations

import os
import shutil

from dflash_host.env.layout import (
    HISTORY,
    ID_RE,
    LOCK,
    LOCK_TAG,
    TMP_LINK_RE,
    env_dir,
    history_is_ours,
    is_own_env,
    read_state,
    remove_env,
)
from dflash_host.host.files import read_bytes
from dflash_host.host.paths import managed_path

# The venv role writes it into root before pushing a wheelhouse: this header, then the folder pushed to.
WHEELHOUSE_RECORD = ".dfp-wheelhouse"
WHEELHOUSE_HEADER = "# dflash-provision (venv role) pushes the control node's wheelhouse to:"
ENVIRONMENT, PUSHED_WHEELHOUSE, HISTORY_KIND = "environment", "the pushed wheelhouse", "the history"


def pushed_wheelhouse(root: str) -> str | None:
    """The folder the venv role recorded pushing the wheelhouse to (root/.dfp-wheelhouse), or None."""
    path = os.path.join(root, WHEELHOUSE_RECORD)
    if os.path.islink(path) or not os.path.isfile(path):
        return None
    lines = (read_bytes(path) or b"").decode("utf-8", "replace").splitlines()
    folder = os.path.expanduser(lines[1]) if len(lines) == 2 and lines[0] == WHEELHOUSE_HEADER else ""
    return os.path.normpath(folder) if os.path.isabs(folder) else None


def own_top_entry(root: str, name: str, history_ours: bool) -> str | None:
    """What root/<name> is, when it is provably the tool's (a kind for the message), else None."""
    path = os.path.join(root, name)
    if name == "current" or TMP_LINK_RE.match(name):
        target = os.readlink(path) if os.path.islink(path) else ""
        ok = target.startswith("envs/") and ID_RE.match(target[len("envs/") :].rstrip("/"))
        return "the `current` symlink" if ok else None
    if os.path.islink(path):
        return None
    if name == HISTORY:
        return HISTORY_KIND if history_ours else None
    if name == LOCK:
        content = read_bytes(path)
        return "the build lock" if os.path.isfile(path) and (content == LOCK_TAG or (content == b"" and history_ours)) else None
    if name == WHEELHOUSE_RECORD:
        return "the wheelhouse record" if pushed_wheelhouse(root) is not None else None
    if name == "wheelhouse":
        return PUSHED_WHEELHOUSE if pushed_wheelhouse(root) == path and os.path.isdir(path) else None
    return None


def purge_plan(root: str) -> tuple[list, list]:
    """([(path, kind)] the tool made and removes, [paths] it leaves), looking only, changing nothing."""
    remove, left = [], []
    building = read_state(root)["building"]
    envs = os.path.join(root, "envs")
    if os.path.isdir(envs) and not os.path.islink(envs):
        for name in sorted(os.listdir(envs)):
            if is_own_env(root, name, building):
                remove.append((env_dir(root, name), ENVIRONMENT))
            else:
                left.append(env_dir(root, name))
    elif os.path.lexists(envs):
        left.append(envs)
    ours = history_is_ours(root)
    for name in sorted(os.listdir(root)):
        if name == "envs":
            continue
        kind = own_top_entry(root, name, ours)
        if kind:
            remove.append((os.path.join(root, name), kind))
        else:
            left.append(os.path.join(root, name))
    return remove, left


def remove_own(root: str, path: str, kind: str) -> None:
    """Remove one entry of the purge plan (what it is decides how)."""
    if kind == ENVIRONMENT:
        remove_env(root, os.path.basename(path))
    elif kind == PUSHED_WHEELHOUSE:
        shutil.rmtree(managed_path(path, "the pushed wheelhouse", root=root, root_field="venv_root"))
    else:
        os.unlink(path)


def remove_empty_folders(root: str, remove: list) -> list:
    """envs/ and, when the history was the tool's, root itself, where the purge emptied them."""
    used_by_us = any(kind == HISTORY_KIND for _, kind in remove)  # the root itself only when it was ours
    gone = []
    for folder in [os.path.join(root, "envs")] + ([root] if used_by_us else []):
        try:
            os.rmdir(folder)  # only when empty: everything in it was the tool's
            gone.append(folder)
        except OSError:
            pass
    return gone
