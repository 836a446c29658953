"""Engine actions that prepare what a host module receives: template renders here, copy with `src:` from the
control node uploads only what differs (a file, or a folder as a manifest)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

from engine.errors import TaskError
from engine.run.actions.call import ActionCall

if TYPE_CHECKING:
    pass


def from_host_data(call: ActionCall, key: str) -> bool:
    """The task's argument `key` was rendered from data a host returned (engine/template/taint.py)."""
    taint = call.taints.get(key)
    return bool(taint and taint.hosts)


def resolve_local(call: ActionCall, src: str, sub: str) -> Path:
    """A file of the control node named by a task: absolute, or in the role's or playbook's `sub` folder.

    A path built from what a host returned (`{{ out.stdout }}`) is data, not the playbook's word: it must stay
    inside the role's or the playbook's folders (no absolute path, no way out with '..' or a symlink)."""
    task, play = call.task, call.play
    from_host = from_host_data(call, "src")
    folders = ([task.role_dir / sub] if task.role_dir is not None else []) + [play.source.parent / sub, play.source.parent]
    candidates = []
    if os.path.isabs(os.path.expanduser(src)) and not from_host:
        candidates.append(Path(os.path.expanduser(src)))
    candidates += [folder / src for folder in folders]
    for c in candidates:
        if c.exists():
            if from_host and not any(c.resolve().is_relative_to(f.resolve()) for f in folders):
                break
            return c
    if from_host:
        raise TaskError(f"{call.where()}: {sub[:-1]} source '{src}' comes from what a host returned, and such a path "
                        f"must name a file inside {', '.join(str(f) for f in folders)}; write the path in the playbook")
    raise TaskError(f"{call.where()}: {sub[:-1]} source '{src}' not found; looked in " + ", ".join(str(c) for c in candidates))


def template(call: ActionCall) -> dict:
    src = resolve_local(call, call.args["src"], "templates/")
    content = call.executor.templar.render_file(str(src), call.view)
    copy_args = {"dest": call.args["dest"], "content": content}
    for k in ("mode", "owner", "group", "backup", "force", "validate"):  # Ansible's template options the copy has
        if call.args.get(k) is not None:
            copy_args[k] = call.args[k]
    return call.module("copy", copy_args)


def _copy_entries(call: ActionCall, src: Path, dest: str) -> tuple[list[tuple[Path, str]], str]:
    """(local file, path relative to the destination folder) pairs, and that folder."""
    if src.is_dir():
        return [(p, str(p.relative_to(src))) for p in sorted(p for p in src.rglob("*") if p.is_file())], dest
    if call.args.get("delete_extra"):
        raise TaskError(f"{call.where()}: delete_extra needs a folder as src; with a single file it would delete "
                        "the other files beside dest")
    if dest.endswith("/"):
        return [(src, src.name)], dest
    return [(src, os.path.basename(dest.rstrip("/")))], os.path.dirname(dest.rstrip("/"))


def _upload(call: ActionCall, needed: list[str], by_rel: dict, stage_root: str, dest: str) -> dict:
    """Put each needed file in a staging folder on the host; a failed upload removes it and fails the task."""
    call.module("file", {"path": stage_root, "state": "directory", "mode": "0700"}, False)
    staged = {}
    for rel in needed:
        path, digest = by_rel[rel]
        remote = f"{stage_root}/{digest}"
        try:
            call.on.client.put(str(path), remote)
        except OSError as exc:  # a full disk or a permission on the host: dest is untouched
            call.module("file", {"path": stage_root, "state": "absent", "recurse": True}, False)
            reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
            raise TaskError(f"{call.where()}: uploading {path} to {dest} failed: {reason}. {dest} is unchanged; free "
                            "space or fix the permissions there and run again.") from None
        staged[rel] = remote
    return staged


def staging_folder(plan: dict, dest_dir: str) -> str:
    """dest's .dfp-staging as the host named it in its plan: an absolute path, `~` expanded there for the user the
    module ran as (become included), as Ansible does. Never the task's text: a `dfp_root: ~/dflash-local` would
    reach the upload as a literal `~` while the install looked in the home folder."""
    return f"{str(plan.get('dest') or dest_dir).rstrip('/')}/.dfp-staging"


COPY_FOLDER_ARGS = ("delete_extra", "mode", "owner", "group")  # what the host's copy takes beside a manifest


def copy_from_control_node(call: ActionCall) -> dict:
    """copy with `src:` on the control node: plan on the host, upload what differs, install atomically."""
    src = resolve_local(call, str(call.args.pop("src")), "files/")
    dest = str(call.args["dest"])
    entries, dest_dir = _copy_entries(call, src, dest)
    given_mode = call.args.get("mode")  # the task's mode for every file; else each keeps the control node's
    manifest = [{"path": rel, "sha256": hashlib.sha256(p.read_bytes()).hexdigest(),
                 **({} if given_mode is not None else {"mode": "%04o" % (p.stat().st_mode & 0o777)})}
                for p, rel in entries]
    extra = {k: v for k, v in call.args.items() if k in COPY_FOLDER_ARGS}
    plan = call.module("copy", {"dest": dest_dir, "manifest": manifest, "phase": "plan", **extra})
    if plan.get("failed") or call.check or not plan.get("would_change"):
        return plan
    stage_root = staging_folder(plan, dest_dir)
    staged = {}
    if plan.get("needed"):
        by_rel = {rel: (path, m["sha256"]) for (path, rel), m in zip(entries, manifest)}
        staged = _upload(call, plan["needed"], by_rel, stage_root, dest)
    result = call.module("copy", {"dest": dest_dir, "manifest": manifest, "phase": "install", "staged": staged, **extra})
    if staged:
        call.module("file", {"path": stage_root, "state": "absent", "recurse": True}, False)
    return result
