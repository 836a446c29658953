"""Engine actions that prepare what a host module receives: template renders here, copy with `src:` from the
control node uploads only what differs (a file, or a folder as a manifest)."""

from __future__ import annotations

import base64
import hashlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.errors import TaskError
from engine.parsing import vault
from engine.run.actions.call import ActionCall
from engine.run.actions.copy_walk import SourceTree, destination_folder, walk_source
from engine.run.actions.template_vars import with_template_variables
from engine.run.variables import search_path
from engine.template.loader import include_loader

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


TEMPLATE_ONLY = ("src", "newline_sequence", "block_start_string", "block_end_string", "variable_start_string",
                 "variable_end_string", "comment_start_string", "comment_end_string", "trim_blocks", "lstrip_blocks",
                 "output_encoding")  # Ansible's template options the copy after it is not given
NEWLINES = {"\\n": "\n", "\\r": "\r", "\\r\\n": "\r\n"}  # as written in YAML without escapes


def template_options(call: ActionCall) -> dict:
    """The Jinja settings a template task gives (Ansible's defaults where it gives none)."""
    args = call.args
    newline = NEWLINES.get(args.get("newline_sequence") or "\n", args.get("newline_sequence") or "\n")
    if newline not in NEWLINES.values():
        raise TaskError(f"{call.where()}: newline_sequence needs to be one of: \\n, \\r or \\r\\n (got "
                        f"{args['newline_sequence']!r})")
    options = {"trim_blocks": bool(args.get("trim_blocks", True)), "lstrip_blocks": bool(args.get("lstrip_blocks", False)),
               "newline_sequence": newline}
    for name in TEMPLATE_ONLY[2:8]:
        if args.get(name):
            options[name] = str(args[name])
    defaults = {"trim_blocks": True, "lstrip_blocks": False, "newline_sequence": "\n"}
    return {} if options == defaults else options


def template(call: ActionCall) -> dict:
    """Ansible's template: rendered here (its Jinja options, output_encoding), then copied as a control-node file
    named as the template (a folder as dest gets that name)."""
    src = resolve_local(call, call.args["src"], "templates/")
    templar = call.executor.templar
    view = with_template_variables(call.view, templar, src, str(call.args["src"]), call.args.get("dest"))
    content = templar.render_file(str(src), view, template_options(call), _include_loader(call, src))
    encoding = call.args.get("output_encoding") or "utf-8"
    try:
        data = content.encode(encoding, errors="surrogateescape")
    except LookupError:
        raise TaskError(f"{call.where()}: output_encoding {encoding!r} is no encoding Python knows; give one such as "
                        "utf-8, latin-1 or utf-16") from None
    except UnicodeEncodeError as exc:
        raise TaskError(f"{call.where()}: the rendered template holds {exc.object[exc.start:exc.end]!r}, which "
                        f"{encoding} cannot encode; use another output_encoding") from None
    args = {k: v for k, v in call.args.items() if k not in TEMPLATE_ONLY and v is not None}
    if args.get("mode") == "preserve":  # Ansible: the template file's own mode
        args["mode"] = "0%03o" % (src.stat().st_mode & 0o7777)
    return _send_file(call, args, src.name, data, None, src)


def _include_loader(call: ActionCall, src: Path) -> Any:
    """Where the template's {% include %} and {% import %} look, as Ansible's template action: the task's search
    path, the playbook's folder, then the template's own folder (each with its templates/)."""
    playbook_dir = str(call.play.source.parent)
    return include_loader(search_path(call.task, playbook_dir), [playbook_dir, str(src.parent)])


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


INLINE_LIMIT = 256 * 1024  # a file up to this size travels inside the module call (one round trip)
DIFF_LIMIT = 104448  # Ansible's MAX_FILE_SIZE_FOR_DIFF (library/copy.py's)
ENGINE_ONLY = ("src", "local_follow", "decrypt")  # what the host's copy is not sent


def copy_from_control_node(call: ActionCall) -> dict:
    """copy with `src:` on the control node: one file as Ansible's copy does (its result fields whichever way the
    bytes travel), a folder through a manifest (plan on the host, upload what differs, install atomically)."""
    if not call.args["src"] and call.args.get("content") is None:  # `src: ''`: Ansible's copy action's words
        return {"failed": True, "changed": False, "msg": "src (or content) is required"}
    src = resolve_local(call, str(call.args["src"]), "files/")
    if src.is_dir():
        return _copy_folder(call, src, str(call.args.pop("src")))
    return _copy_one_file(call, src)


def _source_bytes(call: ActionCall, src: Path) -> bytes | None:
    """The file's bytes when they must or may travel inline: a vault-encrypted file decrypted (Ansible's decrypt:
    true), a small one as it is; None for a larger plain file, which is uploaded as it is."""
    try:
        with open(src, "rb") as fh:
            head = fh.read(64)
        vaulted = bool(call.args.get("decrypt", True)) and vault.is_encrypted(head)
        if not vaulted and src.stat().st_size > INLINE_LIMIT:
            return None
        data = src.read_bytes()
    except OSError as exc:
        raise TaskError(f"{call.where()}: could not find src={src}, {exc.strerror or exc}; fix the path or its "
                        "permissions") from None
    if vaulted:
        return _decrypted(call, src, data)
    return data


def _decrypted(call: ActionCall, src: Path, data: bytes) -> bytes:
    """A vault-encrypted file's plaintext; without a vault password the message ends in Ansible's words (its copy
    target reads them)."""
    try:
        return vault.decrypt(data.decode("utf-8", "replace"), f"{call.where()}: copy src {src}").encode("utf-8")
    except vault.VaultError as exc:
        if vault.password_file() is None:
            raise TaskError(f"{exc} A vault password or secret must be specified to decrypt {src}") from None
        raise


def _plain_copies(call: ActionCall, files: list[tuple[Path, str]], scratch: Path) -> list[tuple[Path, str]]:
    """A folder's files as they are sent: a vault-encrypted one (decrypt: true) as its plaintext in `scratch`,
    with the mode of the file it comes from."""
    out = []
    for i, (path, rel) in enumerate(files):
        with open(path, "rb") as fh:
            vaulted = call.args.get("decrypt", True) is not False and vault.is_encrypted(fh.read(64))
        if vaulted:
            plain = scratch / str(i)
            plain.write_bytes(_decrypted(call, path, path.read_bytes()))
            plain.chmod(path.stat().st_mode & 0o777)
            path = plain
        out.append((path, rel))
    return out


def _sha1_of(path: Path) -> str:
    digest = hashlib.sha1()  # noqa: S324 - Ansible's checksum field
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _copy_one_file(call: ActionCall, src: Path) -> dict:
    """One control-node file, as Ansible's copy action: the host's copy module does what its copy or file module
    would (content there: only mode and owner), and answers its fields (checksum, md5sum, state, mode, ...)."""
    args = {k: v for k, v in call.args.items() if k not in ENGINE_ONLY}
    if args.get("mode") == "preserve":  # Ansible: the control node's file's mode
        args["mode"] = "0%03o" % (src.stat().st_mode & 0o7777)
    return _send_file(call, args, src.name, _source_bytes(call, src), src, src)


def _send_file(call: ActionCall, args: dict, name: str, data: bytes | None, path: Path | None, shown: Path) -> dict:
    """The bytes (data, or the file at path) written at dest by the host's copy: inline when small, else its sha1
    first and an upload only when dest differs."""
    args = {**args, "original_basename": name}
    if data is not None and len(data) <= INLINE_LIMIT:
        result = call.module("copy", {**args, "content_b64": base64.b64encode(data).decode("ascii")})
        return _as_ansible_answers(result, shown)
    with tempfile.TemporaryDirectory(prefix="dfp-template-") as scratch:
        if path is None or data is not None:  # rendered (or decrypted) bytes: uploaded from a file of their own
            path = Path(scratch) / name
            path.write_bytes(data or b"")
        result = call.module("copy", {**args, "source_sha1": _sha1_of(path)})
        if result.get("needed") and not result.get("failed"):
            result = _upload_one(call, path, args, str(result["dest"]))
        elif call.check and isinstance(result.get("diff"), dict) and "path" not in result:
            result["diff"]["src_larger"] = DIFF_LIMIT  # the host saw dest only; this file is past the diff's limit
    return _as_ansible_answers(result, shown)


def _upload_one(call: ActionCall, src: Path, args: dict, dest_file: str) -> dict:
    """A large file: uploaded to a staging folder beside its destination, then written by the host's copy."""
    stage_root = f"{os.path.dirname(dest_file)}/.dfp-staging"
    digest = hashlib.sha256(src.read_bytes()).hexdigest()
    staged = _upload(call, [src.name], {src.name: (src, digest)}, stage_root, dest_file)
    try:
        return call.module("copy", {**args, "src": staged[src.name], "upload": True})
    finally:
        call.module("file", {"path": stage_root, "state": "absent", "recurse": True}, False)


COPY_NAMES = frozenset({"copy", "ansible.builtin.copy", "ansible.legacy.copy"})


def copy_diff_as_list(module: str, args: dict, result: dict) -> None:
    """Ansible's copy action registers the content diff of a write as a list of one (its `diff` starts as a list
    and gets the file's before/after appended); a file left as it was keeps the file module's dict (its
    before/after are dicts); without --diff the list stays empty. remote_src answers as the host's module does."""
    if module not in COPY_NAMES or args.get("remote_src") or result.get("failed"):
        return
    diff = result.get("diff")
    if diff is None:
        result["diff"] = []
    elif isinstance(diff, dict) and not isinstance(diff.get("after"), dict) and not isinstance(diff.get("before"), dict):
        result["diff"] = [diff]


def _as_ansible_answers(result: dict, src: Path) -> dict:
    """What Ansible's copy action adds: the diff's after_header names the control-node file; an existing dest
    left alone (force: false) names the source."""
    result.pop("needed", None)
    diff = result.get("diff")
    if isinstance(diff, dict) and "after_header" in diff:
        diff["after_header"] = str(src)
    if result.get("msg") == "file already exists":
        result["src"] = str(src)
    return result


def _copy_folder(call: ActionCall, src: Path, given: str) -> dict:
    """A folder, as Ansible's copy action: `src/` its content into dest, `src` the folder itself (dest/NAME); its
    files through a manifest (each with the control node's mode unless the task gives one), then its folders
    (directory_mode) and the symlinks it keeps as links. The answer names dest and src, as Ansible's."""
    if call.args.get("attributes") or call.args.get("attr"):
        raise TaskError(f"{call.where()}: attributes are set on one file here; a folder ({src}) is copied without "
                        "them: set them with a file task on each copied file after the copy")
    tree = walk_source(src, call.args.get("local_follow") is not False)
    with tempfile.TemporaryDirectory(prefix="dfp-copy-") as scratch:
        files = _plain_copies(call, tree.files, Path(scratch))
        for name in ENGINE_ONLY:
            call.args.pop(name, None)
        if call.args.get("mode") == "preserve":  # each file keeps the control node's mode, as without a mode
            call.args.pop("mode")
        dest_dir = destination_folder(given, str(call.args["dest"]))
        result = _install_manifest(call, files, dest_dir)
    if result.get("failed"):
        return result
    changed = bool(result.get("changed"))
    folders = tree.directories
    if call.args.get("directory_mode") is not None and not result.get("dest_existed", True):
        folders = ["", *folders]  # the folder the copy made gets directory_mode too (Ansible's copy module)
    for answer in _folders_and_links(call, dest_dir, folders, tree):
        if answer.get("failed"):
            return answer
        changed = changed or bool(answer.get("changed"))
    result.pop("dest_existed", None)
    return {**result, "dest": f"{str(call.args['dest']).rstrip('/')}/", "src": str(src) + ("/" if given.endswith("/")
            else ""), "changed": changed}


def _folders_and_links(call: ActionCall, dest_dir: str, folders: list[str], tree: SourceTree) -> Iterator[dict]:
    """The file module's answer for each folder (state directory, directory_mode) and each kept symlink (state
    link, force), as Ansible's copy action sends them after the files."""
    common = {k: call.args[k] for k in ("owner", "group") if call.args.get(k) is not None}
    for rel in folders:
        mode = {"mode": call.args["directory_mode"]} if call.args.get("directory_mode") is not None else {}
        yield call.module("file", {**common, **mode, "path": f"{dest_dir.rstrip('/')}/{rel}".rstrip("/"),
                                   "state": "directory"})
    for target, rel in tree.symlinks:
        yield call.module("file", {**common, "path": f"{dest_dir.rstrip('/')}/{rel}", "src": target, "state": "link",
                                   "force": True, **({"follow": False} if tree.directories else {})})


def _install_manifest(call: ActionCall, files: list[tuple[Path, str]], dest_dir: str) -> dict:
    """The folder's files: planned on the host, the differing ones uploaded, installed atomically."""
    given_mode = call.args.get("mode")  # the task's mode for every file; else each keeps the control node's
    manifest = [{"path": rel, "sha256": hashlib.sha256(p.read_bytes()).hexdigest(),
                 **({} if given_mode is not None else {"mode": "%04o" % (p.stat().st_mode & 0o777)})}
                for p, rel in files]
    extra = {k: v for k, v in call.args.items() if k in COPY_FOLDER_ARGS}
    plan = call.module("copy", {"dest": dest_dir, "manifest": manifest, "phase": "plan", **extra})
    if plan.get("failed") or call.check or not plan.get("would_change"):
        return plan
    stage_root = staging_folder(plan, dest_dir)
    staged = {}
    if plan.get("needed"):
        by_rel = {rel: (path, m["sha256"]) for (path, rel), m in zip(files, manifest)}
        staged = _upload(call, plan["needed"], by_rel, stage_root, dest_dir)
    result = call.module("copy", {"dest": dest_dir, "manifest": manifest, "phase": "install", "staged": staged, **extra})
    if staged:
        call.module("file", {"path": stage_root, "state": "absent", "recurse": True}, False)
    return {**result, "dest_existed": plan.get("dest_existed", True)}


def unarchive_from_control_node(call: ActionCall) -> dict:
    """unarchive with a control-node `src` (Ansible's default, remote_src false): the archive uploaded to a temp
    folder on the host (in check mode too, as Ansible's), the host's unarchive run on it, the folder removed."""
    src = resolve_local(call, str(call.args["src"]), "files/")
    if src.is_dir():
        raise TaskError(f"{call.where()}: unarchive source '{src}' is a folder; give an archive file (tar, tar.gz, "
                        "tar.bz2, tar.xz or zip)")
    made = call.module("tempfile", {"state": "directory", "prefix": "dfp-unarchive."}, False)
    if made.get("failed"):
        return made
    remote = f"{made['path']}/source"  # Ansible's name for it (a handler is picked by content, not a suffix)
    try:
        with tempfile.TemporaryDirectory(prefix="dfp-unarchive-") as scratch:
            data = _source_bytes(call, src)
            local = src
            if data is not None and vault.is_encrypted(src.read_bytes()[:64]):  # decrypted bytes travel, not the vault
                local = Path(scratch) / src.name
                local.write_bytes(data)
            try:
                call.on.client.put(str(local), remote)
            except OSError as exc:
                reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
                raise TaskError(f"{call.where()}: uploading {src} to the host failed: {reason}; free space in its "
                                "temp folder or fix its permissions") from None
        args = {k: v for k, v in call.args.items() if k not in ("decrypt", "copy")}
        return call.module("unarchive", {**args, "src": remote, "remote_src": True})
    finally:
        call.module("file", {"path": made["path"], "state": "absent"}, False)
