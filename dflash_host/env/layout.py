"""The serving environments' folder (python_env's `root`): its layout, which folders are the tool's, the
activation history and build journal, the atomic switch of `current`, pruning, and the build lock.

Layout under root:
  envs/<name>/       one environment per hash of what is in it, named <hash>; a fresh build (the nightly
                     rebuild) is named <hash>-<UTC time>[-n] beside it. ENV_LOCK inside lists the exact
                     versions installed; ENV_MARKER is written last: only a complete, verified env has it
  current            symlink -> envs/<name>, replaced atomically (symlink to a temp name + rename)
  .dfp-envs.json     activation history, newest last (the rollback target is the one before current), and
                     the names being built (journalled before their folder exists)
  .lock              one build per root at a time (flock, held by the installer's children too)
  wheelhouse/        wheels the venv role pushed (recorded first in .dfp-wheelhouse, beside it)
Only folders the tool provably made are ever deleted: an env whose marker names it, or one in the journal.
What a purge may remove is in dflash_host/env/purge.py.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import shutil
import time

from dflash_host.env.interpreter import ENV_MARKER
from dflash_host.host.files import atomic_write, read_json
from dflash_host.host.paths import managed_path
from dflash_host.module import Context, ModuleError

HISTORY = ".dfp-envs.json"
LOCK = ".lock"
LOCK_TAG = b"dflash-provision python_env: one build of these environments at a time\n"
ENV_LOCK = ".dfp-lock.txt"  # in each env: its exact versions, what rebuild_mode locked installs again
WRITTEN_BY = "dflash-provision python_env"
# An env folder's name: the hash, or hash-<UTC time>[-n] for a fresh build (the nightly rebuild).
ID_RE = re.compile(r"^[0-9a-f]{16}(?:-[0-9]{8}T[0-9]{6}Z(?:-[0-9]+)?)?$")
TMP_LINK_RE = re.compile(r"^\.current\.tmp-[0-9]+$")


def env_dir(root: str, name: str) -> str:
    return os.path.join(root, "envs", name)


def current_env(root: str) -> str | None:
    """The folder name under envs/ that `current` points at (None when there is no `current`)."""
    link = os.path.join(root, "current")
    if not os.path.lexists(link):
        return None
    if not os.path.islink(link):
        raise ModuleError(
            f"{link} exists and is not a symlink (the tool switches environments with a symlink there); "
            f"move it away, e.g. `mv {link} {link}.old`, and run again"
        )
    return os.path.basename(os.readlink(link).rstrip("/"))


def marker_id(marker: dict) -> str | None:
    """The folder name a marker was written for (markers before fresh rebuilds had only the hash)."""
    return marker.get("id") or marker.get("hash")


def complete_marker(root: str, name: str) -> dict | None:
    """The marker of envs/<name> if that env is complete (marker written, interpreter present)."""
    path = env_dir(root, name)
    marker = read_json(os.path.join(path, ENV_MARKER))
    if marker and marker_id(marker) == name and os.path.exists(os.path.join(path, "bin", "python")):
        return marker
    return None


def read_state(root: str) -> dict:
    """The history file: `history` (env names in activation order, newest last) and `building` (names
    whose folder a build has created and not yet finished: only an interrupted build leaves one there)."""
    data = read_json(os.path.join(root, HISTORY)) or {}

    def names(key: str) -> list:
        value = data.get(key)
        return [x for x in value if isinstance(x, str) and ID_RE.match(x)] if isinstance(value, list) else []

    return {"history": names("history"), "building": names("building")}


def write_state(root: str, history: list, building: list) -> None:
    text = json.dumps({"written_by": WRITTEN_BY, "history": history, "building": building}, indent=1) + "\n"
    atomic_write(os.path.join(root, HISTORY), text.encode())


def read_history(root: str) -> list:
    return read_state(root)["history"]


def history_is_ours(root: str) -> bool:
    """The history file is one python_env wrote: its own signature, or the old layout and nothing else."""
    data = read_json(os.path.join(root, HISTORY))
    if not data or not isinstance(data.get("history"), list):
        return False
    return data.get("written_by") == WRITTEN_BY or set(data) == {"history"}


def mark_building(root: str, name: str, building: bool) -> None:
    """Record (before its folder exists) or clear that envs/<name> is being built, so that a folder an
    interrupted build leaves behind is provably the tool's and can be removed."""
    state = read_state(root)
    names = [x for x in state["building"] if x != name] + ([name] if building else [])
    write_state(root, state["history"], names)


def is_own_env(root: str, name: str, building: list) -> bool:
    """envs/<name> is a real folder this tool built (its marker names it) or began to build (journal)."""
    path = env_dir(root, name)
    if not ID_RE.match(name) or os.path.islink(path) or not os.path.isdir(path):
        return False
    marker = read_json(os.path.join(path, ENV_MARKER))
    return bool(marker and marker_id(marker) == name) or name in building


def remove_env(root: str, name: str) -> str:
    """Delete envs/<name> once it is plain that the place is inside root/envs (symlinks resolved)."""
    envs = os.path.join(root, "envs")
    path = managed_path(env_dir(root, name), "the environment folder", root=envs, root_field="venv_root/envs")
    shutil.rmtree(path)
    return path


def clear_incomplete(root: str, name: str, ctx: Context) -> None:
    """Remove what an interrupted build left at envs/<name>, if the tool made it; refuse anything else."""
    path = env_dir(root, name)
    if not os.path.lexists(path):
        return
    if not is_own_env(root, name, read_state(root)["building"]):
        raise ModuleError(
            f"{path} exists but is not an environment this tool built (no {ENV_MARKER}, not recorded in "
            f"{HISTORY}); it was left untouched. Move it away (e.g. `mv {path} {path}.old`) and run again"
        )
    ctx.say(f"removing the incomplete environment {path}")
    remove_env(root, name)


def new_env_name(root: str, h: str) -> str:
    """A folder name for a fresh build of hash h that no folder has: <hash>-<UTC time>[-n]."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    name, n = f"{h}-{stamp}", 1
    while os.path.lexists(env_dir(root, name)):
        n += 1
        name = f"{h}-{stamp}-{n}"
    return name


def existing_env(root: str, h: str) -> tuple[str, dict | None]:
    """The complete env of hash h to reuse (envs/<h>, else the newest active one built from the same
    requirements), or (h, None) when one must be built."""
    marker = complete_marker(root, h)
    if marker:
        return h, marker
    for name in reversed(read_history(root)):
        marker = complete_marker(root, name)
        if marker and marker.get("hash") == h:
            return name, marker
    return h, None


def switch_current(root: str, name: str) -> None:
    """Point `current` at envs/<name>: a new symlink under a temp name renamed over the old one."""
    link = os.path.join(root, "current")
    tmp = os.path.join(root, f".current.tmp-{os.getpid()}")
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(os.path.join("envs", name), tmp)
    os.replace(tmp, link)
    fd = os.open(root, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def prune_plan(history: list, present: list, current: str | None, keep: int) -> list:
    """Env folders to delete: all but current and the `keep` most recently active before it.

    history: hashes in activation order, newest last; present: folder names under envs/.
    """
    kept: list = []
    for h in reversed(history):
        if h == current or h in kept or h not in present:
            continue
        if len(kept) >= keep:
            break
        kept.append(h)
    keep_set = set(kept) | ({current} if current else set())
    return sorted(name for name in present if name not in keep_set)


def prune(root: str, history: list, current: str, keep: int, building: list, ctx: Context) -> list:
    """Delete the tool's env folders beyond current and `keep` previous ones; leave (and name) the rest."""
    names = sorted(os.listdir(os.path.join(root, "envs")))
    own = [n for n in names if is_own_env(root, n, building)]
    foreign = [n for n in names if n not in own]
    if foreign:
        ctx.warn(
            f"left {', '.join(foreign)} in {root}/envs untouched: not environments this tool built (no "
            f"{ENV_MARKER}); remove them yourself if they are not needed"
        )
    doomed = prune_plan(history, own, current, keep)
    for name in doomed:
        ctx.say(f"pruning {root}/envs/{name}")
        remove_env(root, name)
    return doomed


def activate(root: str, name: str, previous: str | None, keep: int, ctx: Context) -> list:
    """Switch `current` to envs/<name>, record it in the history, prune; returns the pruned names.
    Runs under the root lock, so names still marked as building belong to interrupted builds."""
    switch_current(root, name)
    state = read_state(root)
    history = [x for x in state["history"] if x != name]
    if previous and previous != name and previous not in history and complete_marker(root, previous):
        history.append(previous)  # an env made before the history file existed
    history.append(name)
    doomed = prune(root, history, name, keep, state["building"], ctx)
    building = [x for x in state["building"] if x not in doomed]
    write_state(root, [x for x in history if x not in doomed], building)
    return doomed


def roll_back_history(root: str, current: str | None, previous: str) -> None:
    """Make `previous` current and the newest in the history; the env rolled back from leaves the history,
    so a second rollback goes further back instead of returning to it."""
    switch_current(root, previous)
    state = read_state(root)
    history = [h for h in state["history"] if h not in (current, previous)] + [previous]
    write_state(root, history, state["building"])


class RootLock:
    """flock on root/.lock; the fd is handed to installer children so an orphaned pip keeps it held."""

    def __init__(self, root: str, timeout: float, ctx: Context):
        self.path = os.path.join(root, LOCK)
        self.timeout = timeout
        self.ctx = ctx
        self.fd = -1

    def __enter__(self) -> RootLock:
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + self.timeout
        said = False
        while not self._try_lock():
            if time.monotonic() > deadline:
                os.close(self.fd)
                raise ModuleError(
                    f"another build of this environment root holds {self.path} for more than "
                    f"{self.timeout:.0f} s; wait for it to finish (or stop it), then run again"
                )
            if not said:
                self.ctx.say(f"waiting for another build to release {self.path}")
                said = True
            time.sleep(0.5)
        if os.fstat(self.fd).st_size == 0:  # name the file as the tool's, so that a purge can prove it
            os.write(self.fd, LOCK_TAG)
        return self

    def _try_lock(self) -> bool:
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            return False

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)
