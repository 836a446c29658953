"""Ensure a file has the given content, mode and owner (ansible.builtin.copy's host side: its options, results
and messages); or a folder holds a given set of files (the engine's `src:` on the control node).

One file: `content` (text; a mapping or list is written as JSON, as Ansible does) or `content_b64` (bytes, ours),
or with `remote_src: true` the file `src` already on the host; written through a temp file in dest's folder
(checked by `validate`, a command with %s, before the rename), only when its sha1 differs; a symlink at dest is
replaced by the file unless `follow: true` (then its target is written). `force: false` leaves an existing dest
alone; `backup` keeps the old file as DEST.PID.YYYY-MM-DD@HH:MM:SS~ (`backup_file`); `mode` is a number, an octal
string or symbolic (u=rw,g=r,o=), `preserve` (remote_src) takes src's; a new file gets 0666 less the umask, a
replaced one keeps its mode (with remote_src: src's, as Ansible's). Results as Ansible's: changed, dest,
checksum (sha1), md5sum and src where its copy module answers (a write, remote_src), path where its file module
does (content already there), and for a dest that exists uid, gid, owner, group, mode, state and size;
backup_file; with --diff the content's before/after (before_header, after_header; dst_binary, src_binary,
dst_larger, src_larger for what is not shown) or, content already there, the file module's mode/owner diff.
Beside them ours: msg, sha256 (of the content). tests/library/test_copy_against_ansible.py runs both.

dest's missing folders are created (0755 less the umask, or directory_mode, each) only for a dest ending in `/`,
as Ansible's; a missing folder otherwise fails with Ansible's "Destination directory ... does not exist".
Where it differs on purpose: in check mode that missing folder is a change, not a failure (on a fresh host the task
that makes it is only reported, so a check run of a whole role would otherwise stop there); `validate` without %s is refused before
anything is compared; remote_src validates the copy, where
Ansible sets the task's mode and owner on src itself to validate it; mode preserve with content is refused
(Ansible's takes its controller temp file's 0600); the result has no `src` for content (Ansible's names its
uploaded temp file, gone when the task ends). `attributes` are set with chattr where the host has it; local_follow
and decrypt are the engine's (src on the control node); with remote_src and a folder as src, local_follow says
whether its symlinks are followed (dflash_host/host/copytree.py merges the tree, as Ansible's). unsafe_writes and the SELinux options are not arguments: a
task using them is refused when the playbook is loaded.

A folder (the engine drives this for `src:` on the control node): `manifest` lists the files by path,
sha256 and mode; phase `plan` says which files the host lacks, the engine uploads those to temp
files, and phase `install` checks each upload's sha256 and renames it into place.

Folder mode results: `needed` (paths whose content differs or is missing), `mode_changes`, `dest_existed`,
`owner_changes`, `extra` (with delete_extra), `would_change`; install adds `installed`, `deleted`.
Plan is changed=false, except in check mode where it reports `would_change` (the plan is then the
answer). Install in check mode needs no uploads. The engine should run install whenever the plan
says `would_change` (a mode fix or an extra file needs no upload). Staged files are consumed (moved
into place, or removed when not needed); paths with equal content may share one upload. Put them on
dest's filesystem so the rename is atomic. Parent folders missing on the host are created (0755).
The folder's helpers (manifest checks, scanning, placing uploads) are dflash_host/host/manifest.py.
"""

from __future__ import annotations

import base64
import binascii
import errno
import hashlib
import os
import posixpath
import re
import stat

from dflash_host.host import attributes
from dflash_host.host.copytree import copy_tree, tree_destination
from dflash_host.host.fileattrs import (
    lookup_gid,
    lookup_uid,
    mode_arg,
    mode_for,
    new_file_mode,
    path_info,
    set_attributes,
)
from dflash_host.host.files import atomic_write, backup_name, write_failed
from dflash_host.host.manifest import (
    NEW_DIR_MODE,
    NEW_FILE_MODE,
    check_delete_extra_dest,
    check_manifest,
    existing_files,
    extra_paths,
    place,
    plan_entries,
    prune_empty_dirs,
    scan_entry,
    sha256_file,
)
from dflash_host.module import Context, ModuleError, main

ARGS = {
    "dest": {
        "type": "path",
        "required": True,
        "help": "the file (or, with manifest, the folder) on the host; an existing folder (remote_src) gets src's "
                "name in it",
    },
    "content": {"type": "raw", "default": None,
                "help": "the file's text (UTF-8); a mapping or a list is written as JSON"},
    "content_b64": {"type": "str", "default": None, "help": "the file's bytes, base64 (ours)"},
    "src": {"type": "path", "default": None,
            "help": "with remote_src: the file on the host to copy (without it, src: in a task is a file on the "
                    "control node, which the engine uploads)"},
    "remote_src": {"type": "bool", "default": False, "help": "src is a file already on the host"},
    "local_follow": {"type": "bool", "default": None,
                     "help": "src on the control node: follow its symlinks (false: a folder's symlinks are refused; "
                             "not given: true); remote_src folder: true copies a link's target, false the link, not "
                             "given keeps links (as Ansible's module)"},
    "decrypt": {"type": "bool", "default": True,
                "help": "src on the control node: a vault-encrypted file is decrypted before it is sent"},
    "original_basename": {"type": "str", "default": None,
                          "help": "ours, the engine's: the control-node file's name (an existing folder as dest gets "
                                  "it in that folder); its content is written as content is, and src is reported"},
    "upload": {"type": "bool", "default": False,
               "help": "ours, the engine's: src is its upload of a control-node file, written as content is (not "
                       "as remote_src) and removed after"},
    "source_sha1": {"type": "str", "default": None,
                    "help": "ours, the engine's: the sha1 of a control-node file not sent yet; everything but the "
                            "write is done, and a write needed answers needed: true with the file's path"},
    "mode": {  # the file attributes' mode, with what copy makes of it
        "help": 'octal string such as "0640" (or the number YAML makes of 0640), symbolic (u=rw,g=r,o=), or '
                "preserve (remote_src: src's mode); none: a new file gets 0666 less the umask, a replaced one keeps "
                "its mode; with manifest: the default for its entries (octal only)",
    },
    "directory_mode": {"type": "raw", "default": None,
                       "help": "the mode of each folder created for dest (none: 0755 less the umask); existing "
                               "folders keep theirs"},
    "_groups": ("file_attributes",),  # mode (above), owner, group: dflash_host/shared_args.py
    "attributes": {"type": "str", "default": None,
                   "help": "file attributes as chattr takes them (+i, -a, =A; letters alone: exactly those), read "
                           "with lsattr; nothing is done where the host has no chattr"},
    "attr": {"type": "str", "default": None, "alias_of": "attributes", "help": "alias of attributes"},
    "backup": {"type": "bool", "default": False,
               "help": "keep a copy of a file whose content is replaced (DEST.PID.YYYY-MM-DD@HH:MM:SS~, in "
                       "backup_file)"},
    "force": {"type": "bool", "default": True, "help": "false: an existing dest is left as it is (content, mode, owner)"},
    "follow": {"type": "bool", "default": False,
               "help": "a symlink at dest: write its target (false: the link is replaced by the file)"},
    "validate": {"type": "str", "default": None,
                 "help": "a command run on the new content (%s: its temp file beside dest) before it replaces dest, "
                         "without a shell; a non-zero exit fails the task and leaves dest as it was"},
    "checksum": {"type": "str", "default": None,
                 "help": "the sha1 the content (or src) must have; a mismatch fails the task before dest is written"},
    "manifest": {
        "type": "list",
        "default": None,
        "help": "folder mode: the files, [{\"path\": \"a/b.txt\", \"sha256\": \"...\", \"mode\": \"0644\"}, ...]",
    },
    "phase": {
        "type": "str",
        "default": "plan",
        "choices": ["plan", "install"],
        "help": "folder mode: plan (changes nothing, returns `needed`) or install",
    },
    "staged": {
        "type": "dict",
        "default": None,
        "help": "folder mode, install: {relative path: host path of the uploaded temp file}",
    },
    "delete_extra": {
        "type": "bool",
        "default": False,
        "help": "folder mode: remove files under dest that the manifest does not list",
    },
}
# The arguments that decide what runs or which file, folder or address is touched: never built from what a
# host returned when the task runs on the control node (engine/run/trust.py).
CODE_ARGS = ("dest", "src", "validate", "staged", "manifest", "original_basename")

DIFF_LIMIT = 104448  # Ansible's MAX_FILE_SIZE_FOR_DIFF: larger files are not shown in the diff
ONE_FILE_ONLY = ("content", "content_b64", "src", "remote_src", "validate", "checksum", "directory_mode",
                 "original_basename", "upload", "source_sha1")


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _digests(data: bytes | None, path: str | None) -> tuple[str, str, str]:
    """(sha1, md5, sha256) of the bytes, or of the file at path (read in chunks)."""
    digests = [hashlib.sha1(), hashlib.md5(), hashlib.sha256()]  # noqa: S324 - Ansible's checksum and md5sum fields
    if data is not None:
        for d in digests:
            d.update(data)
    else:
        with open(path or "", "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                for d in digests:
                    d.update(chunk)
    sha1, md5, sha256 = (d.hexdigest() for d in digests)
    return sha1, md5, sha256


def sha1_file(path: str) -> str | None:
    """The sha1 of a regular file (not a symlink) this user can read, else None (Ansible's dest checksum)."""
    if os.path.islink(path) or not os.path.isfile(path) or not os.access(path, os.R_OK):
        return None
    return _digests(None, path)[0]


# ---------------------------------------------------------------- single file


class Source:
    """The bytes wanted at dest: `data` (content, content_b64) or the host file `path` (remote_src)."""

    def __init__(self, data: bytes | None, path: str | None, sha1: str | None = None) -> None:
        self.data, self.path = data, path
        if sha1 is not None:  # the engine's file not sent yet: only its sha1 is known
            self.sha1, self.md5, self.sha256 = sha1, "", ""
        else:
            self.sha1, self.md5, self.sha256 = _digests(data, path)

    @property
    def absent(self) -> bool:
        """Only the sha1 is here (source_sha1): the bytes are still on the control node."""
        return self.data is None and self.path is None

    def head(self, size: int) -> bytes:
        if self.data is not None:
            return self.data[:size]
        with open(self.path or "", "rb") as fh:
            return fh.read(size)

    @property
    def size(self) -> int:
        return len(self.data) if self.data is not None else os.path.getsize(self.path or "")


def file_source(args: dict) -> Source:
    """What to write, from content, content_b64 or remote_src's src (exactly one), refusing folder-mode arguments
    and the combinations Ansible refuses, with its words."""
    if args["staged"]:
        raise ModuleError("module 'copy': argument 'staged' belongs to folder mode; give 'manifest' too or drop it")
    if args["delete_extra"]:
        raise ModuleError("module 'copy': delete_extra only works with 'manifest' (folder mode); drop it")
    given = [name for name in ("content", "content_b64", "src", "source_sha1") if args[name] is not None]
    if not given:
        raise ModuleError("src (or content) is required; give content (text), content_b64 (bytes), or src with "
                          "remote_src: true (a file on the host)")
    if len(given) > 1:
        what = "src and content are mutually exclusive" if "src" in given else "content and content_b64 are mutually exclusive"
        raise ModuleError(f"{what}; keep one of {', '.join(given)}")
    if args["content"] is not None:
        content = args["content"]
        if isinstance(content, (dict, list)):
            import json

            content = json.dumps(content)
        return Source(str(content).encode("utf-8", errors="surrogateescape"), None)
    if args["source_sha1"] is not None:
        if not re.fullmatch(r"[0-9a-f]{40}", args["source_sha1"]):
            raise ModuleError("module 'copy': source_sha1 must be a sha1 (40 hex digits); the engine sends it")
        return Source(None, None, args["source_sha1"])
    if args["content_b64"] is not None:
        try:
            return Source(base64.b64decode(args["content_b64"], validate=True), None)
        except (binascii.Error, ValueError) as exc:
            raise ModuleError(f"module 'copy': content_b64 is not valid base64 ({exc}); encode the bytes with base64")
    src = os.path.expandvars(args["src"])
    if args["upload"] and not args["remote_src"] and os.path.isfile(src):
        return Source(None, src)
    if not args["remote_src"]:
        raise ModuleError("module 'copy': src here is a file on the host, which needs remote_src: true (a file on the "
                          "control node is uploaded by the engine: copy with src: in a task)")
    if not os.path.exists(src):
        raise ModuleError(f"Source {src} not found; give the path of a file on the host")
    if not os.access(src, os.R_OK):
        raise ModuleError(f"Source {src} not readable; fix its permissions (or become a user who may read it)")
    if not os.path.isfile(src):
        raise ModuleError(f"Cannot copy invalid source '{src}': not a file")
    return Source(None, src)


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def content_diff(dest: str, source: Source) -> dict:
    """Ansible's copy diff (_get_diff_data): dest as it is (before, or dst_binary / dst_larger) and the new content
    (after, or src_binary / src_larger)."""
    diff: dict = {}
    if not os.path.lexists(dest) or not os.path.exists(dest):
        diff["before"] = ""
    else:
        try:
            with open(dest, "rb") as fh:
                head = fh.read(8192)
            size = os.lstat(dest).st_size
            if b"\x00" in head:
                diff["dst_binary"] = 1
            elif size > DIFF_LIMIT:
                diff["dst_larger"] = DIFF_LIMIT
            else:
                with open(dest, "rb") as fh:
                    diff.update(before_header=dest, before=_text(fh.read()))
        except OSError:
            diff["before"] = ""
    if source.absent:  # the engine adds the control-node file's side
        return diff
    if source.size > DIFF_LIMIT:
        diff["src_larger"] = DIFF_LIMIT
    else:
        data = source.data if source.data is not None else source.head(DIFF_LIMIT + 1)
        if b"\x00" in data:
            diff["src_binary"] = 1
        else:
            diff.update(after_header=dest if source.path is None else source.path, after=_text(data))
    return diff


def _mode(args: dict, source: Source) -> int | str | None:
    value = args["mode"]
    if value == "preserve":
        if source.path is None:
            raise ModuleError("module 'copy': mode preserve keeps the mode of src, and content has none; give a mode "
                              "such as \"0644\"")
        return stat.S_IMODE(os.stat(source.path).st_mode)
    return mode_arg(value, "copy")


def make_parents(folder: str, directory_mode: int | str | None) -> None:
    """dest's missing folders (a dest ending in /), each 0755 less the umask or directory_mode."""
    missing = []
    at = folder
    while not os.path.lexists(at) and at != os.path.dirname(at):
        missing.append(at)
        at = os.path.dirname(at)
    for path in reversed(missing):
        try:
            os.mkdir(path, NEW_DIR_MODE)
        except FileExistsError:
            continue
        if directory_mode is not None:
            os.chmod(path, mode_for(directory_mode, os.stat(path)))


def _where(args: dict, source: Source) -> str:
    """The file to write: dest, or the file named as src (or original_basename) in the folder dest names."""
    dest = os.path.abspath(os.path.expandvars(args["dest"]))
    if args["dest"].endswith("/") or os.path.isdir(dest):
        name = args["original_basename"] or (os.path.basename(source.path) if source.path is not None else None)
        if name is None:
            raise ModuleError(f"can not use content with a dir as dest: {dest} is a folder; give the file's full path "
                              "(folder/NAME)")
        dest = os.path.join(dest, name)
    return dest


def missing_folder(args: dict, dest: str, ctx: Context) -> dict | None:
    """Ansible's rule for a dest whose folder is missing: with a trailing `/` the folders are made (check mode
    answers here that they would be), otherwise the task fails before anything is compared or written."""
    folder = os.path.dirname(dest)
    if os.path.lexists(dest) or os.path.isdir(folder):
        return None
    if not args["dest"].endswith("/"):
        if ctx.check:  # on a fresh host an earlier task (skipped in check mode) makes it: the write would happen
            return {"changed": True, "src": args["src"],
                    "msg": f"would write {dest}; its folder {folder} does not exist yet (an earlier task is to make it)"}
        raise ModuleError(f"Destination directory {folder} does not exist")  # Ansible's words
    if not ctx.check:
        return None
    return {"changed": True, "msg": f"dest directory {folder} would be created", "src": args["src"]}


def run_file(args: dict, ctx: Context) -> dict:
    source = file_source(args)
    lookup_uid(args["owner"]), lookup_gid(args["group"])  # an owner the host lacks fails before anything is written
    mode = _mode(args, source)
    directory_mode = mode_arg(args["directory_mode"], "copy")
    validate = args["validate"]
    if validate is not None and "%s" not in validate:
        raise ModuleError(f"validate must contain %s: {validate}; write %s where the file to check goes")
    remote = bool(args["remote_src"]) and source.path is not None
    dest = shown = _where(args, source)
    early = missing_folder(args, dest, ctx)
    if early is not None:
        return early
    if args["follow"] and os.path.islink(dest) and os.path.exists(dest):
        dest = os.path.realpath(dest)
    present = os.path.exists(dest) if (args["follow"] or remote) else os.path.lexists(dest)
    base = {"dest": dest, "checksum": source.sha1, **({"sha256": source.sha256} if source.sha256 else {})}
    if remote:
        base.update(src=source.path, md5sum=source.md5)
    if present and not args["force"]:
        return {"dest": dest, **({"src": source.path} if remote else {}), "changed": False, "msg": "file already exists"}
    write = sha1_file(dest) != source.sha1 or os.path.islink(dest)
    if args["checksum"] and (write or remote) and args["checksum"] != source.sha1:
        raise ModuleError("Copied file does not match the expected checksum. Transfer failed. (the content's sha1 is "
                          f"{source.sha1}; fix the content or the checksum)", checksum=source.sha1,
                          expected_checksum=args["checksum"])
    if not write:
        return _keep(dest, base, args, mode, remote, ctx)
    if source.absent and not ctx.check:  # the engine uploads the file, then calls again with it as src
        return {"dest": dest, "checksum": source.sha1, "needed": True, "changed": False,
                "msg": f"{dest} needs the file from the control node"}
    result = {**base, "changed": True, **({"md5sum": source.md5} if source.md5 else {})}
    if ctx.diff:
        result["diff"] = content_diff(shown, source)
    if ctx.check:
        result["msg"] = f"check mode: would {'update' if present else 'create'} {dest}"
        if present:
            set_attributes(dest, None if os.path.islink(dest) else mode, args["owner"], args["group"], True)
            result.update(path_info(dest))
        return result
    return _write(dest, source, args, mode, directory_mode, remote, result)


def _write(dest: str, source: Source, args: dict, mode, directory_mode, remote: bool, result: dict) -> dict:
    """dest written from the source (through a temp file beside it, validated, renamed), its attributes set."""
    backup = backup_name(dest, "ansible") if args["backup"] and os.path.exists(dest) else False
    folder = os.path.dirname(dest)
    passed_through = None  # the temp file an engine-sent file passed through (Ansible's src names its upload)
    try:
        if not os.path.isdir(folder):
            make_parents(folder, directory_mode)
        replaced = os.path.exists(dest) and not os.path.islink(dest)
        if remote and replaced:
            base_mode = stat.S_IMODE(os.stat(source.path or "").st_mode)  # Ansible: src's attributes, not dest's
        elif replaced:
            base_mode = stat.S_IMODE(os.stat(dest).st_mode)
        else:
            base_mode = new_file_mode()
        final = base_mode if mode is None else mode_for(mode, _as_file(base_mode))
        data, from_path = source.data, source.path
        if args["original_basename"] is not None and data is not None:
            passed_through = _pass_through(folder, data)
            data, from_path = None, passed_through
        backup_file = atomic_write(dest, data, final, backup, args["validate"], os.path.splitext(dest)[1], from_path)
        if remote:  # Ansible's copystat of src: its times (and, over a file, its mode) go to dest
            st = os.stat(source.path or "")
            os.utime(dest, ns=(st.st_atime_ns, st.st_mtime_ns))
        set_attributes(dest, mode, args["owner"], args["group"], False)
        attributes.ensure(dest, args["attributes"], False)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):  # a full disk: say so, and that dest is as it was
            size = len(source.data) if source.data is not None else os.path.getsize(source.path or dest)
            raise write_failed(dest, exc, size) from None
        raise ModuleError(f"Failed to copy {source.path or 'the content'} to {dest}: {exc.strerror}; fix the "
                          "permissions of the path or its folder") from None
    finally:
        for used in (passed_through, source.path if args["upload"] else None):
            if used and os.path.isfile(used):
                os.unlink(used)
    if args["original_basename"] is not None or args["upload"]:
        result["src"] = passed_through or source.path
    if backup_file:
        result["backup_file"] = backup_file
    result.update(path_info(dest), msg=f"{'updated' if replaced else 'created'} {dest}")
    return result


def _pass_through(folder: str, data: bytes) -> str:
    """A temp file in dest's folder holding data (the engine sent a small file inline, as an upload would arrive)."""
    import tempfile

    fd, path = tempfile.mkstemp(prefix=".dfp-source-", dir=folder)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
    except OSError:  # a full disk: no temp file is left beside dest
        os.unlink(path)
        raise
    return path


def _as_file(mode: int) -> os.stat_result:
    """A regular file's stat with `mode`: what a symbolic mode is applied to before the file exists."""
    return os.stat_result((stat.S_IFREG | mode, 0, 0, 1, 0, 0, 0, 0, 0, 0))


def _keep(dest: str, base: dict, args: dict, mode, remote: bool, ctx: Context) -> dict:
    """The content is there already: only the mode, owner and group (Ansible's file module on dest, or its copy
    module for remote_src)."""
    diff: dict | None = {"before": {"path": dest}, "after": {"path": dest}} if ctx.diff and not remote else None
    changed = set_attributes(dest, mode, args["owner"], args["group"], ctx.check, diff)
    changed = attributes.ensure(dest, args["attributes"], ctx.check, diff) or changed
    result = {**base, "changed": changed}
    if not remote:
        result["path"] = dest
    if diff is not None:
        result["diff"] = diff
    verb = "would change" if ctx.check else "changed"
    result.update(path_info(dest), msg=f"{verb} the mode/owner of {dest}" if changed else f"{dest} is as wanted "
                  f"(sha1 {base['checksum'][:12]})")
    return result


# ---------------------------------------------------------------- folder (manifest)


def folder_args(args: dict) -> dict:
    """The folder-mode arguments checked: entries, uid, gid, dest_real, staged {path: upload}, wanted {path: entry}."""
    for name in ONE_FILE_ONLY:
        if args[name] not in (None, False):
            raise ModuleError(f"module 'copy': give either '{name}' or 'manifest', not both")
    mode = mode_arg(args["mode"], "copy")
    if isinstance(mode, str):
        raise ModuleError(f"module 'copy': with a manifest mode is the default of its entries, an octal mode such as "
                          f"\"0644\", not {mode!r}")
    entries = check_manifest(args["manifest"], mode)
    uid, gid = lookup_uid(args["owner"], ansible_words=False), lookup_gid(args["group"], ansible_words=False)
    dest = args["dest"]
    if args["delete_extra"]:
        check_delete_extra_dest(dest)
    if os.path.lexists(dest) and not os.path.isdir(dest):
        raise ModuleError(f"module 'copy': dest {dest} exists and is not a directory; with a manifest dest is a folder")
    # uploads named from the task's text (`~/...`) are this host user's, as dest is (module.py expands a path)
    staged = {posixpath.normpath(k): os.path.expanduser(v) if isinstance(v, str) else v
              for k, v in (args["staged"] or {}).items()}
    wanted = {e["path"]: e for e in entries}
    unknown = sorted(set(staged) - set(wanted))
    if unknown:
        raise ModuleError(f"module 'copy': staged path(s) {', '.join(unknown)} are not in the manifest; stage only listed files")
    if staged and args["phase"] == "plan":
        raise ModuleError("module 'copy': 'staged' is for phase install; phase plan only reports what is needed")
    return {
        "entries": entries,
        "uid": uid,
        "gid": gid,
        "dest_real": os.path.realpath(dest),
        "staged": staged,
        "wanted": wanted,
    }


def plan_folder(f: dict, delete_extra: bool) -> tuple:
    """(plan, found): what differs between the manifest and the folder (the `base` of every folder result),
    and what was found at each entry."""
    dest_real, wanted, uid, gid = f["dest_real"], f["wanted"], f["uid"], f["gid"]
    found = {e["path"]: scan_entry(dest_real, e["path"]) for e in f["entries"]} if os.path.isdir(dest_real) else {}
    needed, mode_changes = plan_entries(f["entries"], found)
    owner_changes = [
        p
        for p in wanted
        if p not in needed
        and found.get(p)
        and ((uid is not None and found[p]["uid"] != uid) or (gid is not None and found[p]["gid"] != gid))
    ]
    staged_abs = {os.path.realpath(p) for p in f["staged"].values() if isinstance(p, str)}
    extra = []
    if delete_extra and os.path.isdir(dest_real):
        extra = extra_paths(existing_files(dest_real, staged_abs), list(wanted))
    would_change = bool(needed or mode_changes or owner_changes or extra or not os.path.isdir(dest_real))
    plan = {
        "dest": dest_real,
        "needed": needed,
        "mode_changes": mode_changes,
        "owner_changes": owner_changes,
        "extra": extra,
        "would_change": would_change,
        "files": len(f["entries"]),
        "dest_existed": os.path.isdir(dest_real),  # the engine gives a folder it made directory_mode
    }
    return plan, found


def folder_diff(plan: dict, found: dict, wanted: dict) -> dict:
    needed, mode_changes, extra = plan["needed"], plan["mode_changes"], plan["extra"]
    return {
        "before": {p: (found.get(p) or {}).get("sha256") or "absent" for p in needed + mode_changes}
        | {p: "present" for p in extra},
        "after": {p: wanted[p]["sha256"] for p in needed}
        | {p: f"mode {wanted[p]['mode']:04o}" for p in mode_changes}
        | {p: "absent" for p in extra},
    }


def verify_staged(plan: dict, f: dict) -> None:
    """Every needed file was uploaded, and each upload has the sha256 the manifest gives; else nothing is installed."""
    staged, wanted, needed = f["staged"], f["wanted"], plan["needed"]
    missing = [p for p in needed if p not in staged]
    if missing:
        raise ModuleError(
            f"module 'copy': {len(missing)} file(s) differ on the host but were not staged: "
            f"{', '.join(missing[:10])}; run phase plan, upload each needed file, then install",
            **plan,
        )
    bad = []
    for rel, path in sorted(staged.items()):
        if not isinstance(path, str) or not os.path.isfile(path):
            bad.append(f"{rel} (staged file {path!r} is missing)")
        elif rel in needed and sha256_file(path) != wanted[rel]["sha256"]:
            bad.append(
                f"{rel} (staged file {path} has sha256 {sha256_file(path)[:12]}, manifest says {wanted[rel]['sha256'][:12]})"
            )
    if bad:
        raise ModuleError(
            f"module 'copy': staged upload(s) do not match the manifest: {'; '.join(bad)}; "
            f"nothing was installed; upload them again",
            **plan,
        )


def install_folder(plan: dict, f: dict) -> tuple:
    """(installed, deleted): uploads placed, modes fixed, extra files removed, owners set; unused uploads removed."""
    dest_real, wanted, staged = f["dest_real"], f["wanted"], f["staged"]
    installed, deleted = [], []
    try:
        os.makedirs(dest_real, mode=NEW_DIR_MODE, exist_ok=True)
        for rel in plan["needed"]:
            target = os.path.join(dest_real, *rel.split("/"))
            mode = wanted[rel]["mode"]
            if mode is None:
                mode = NEW_FILE_MODE
            upload = staged.pop(rel)
            shared = upload in staged.values()  # files with equal content may share one upload
            place(upload, target, mode, keep=shared)
            installed.append(rel)
        for rel in plan["mode_changes"]:
            os.chmod(os.path.join(dest_real, *rel.split("/")), wanted[rel]["mode"])
        for rel in plan["extra"]:
            os.unlink(os.path.join(dest_real, *rel.split("/")))
            deleted.append(rel)
        if plan["extra"]:
            keep = {posixpath.dirname(p) for p in wanted}
            keep |= {"/".join(k.split("/")[:i]) for k in list(keep) for i in range(1, k.count("/") + 1)}
            prune_empty_dirs(dest_real, keep)
        if f["uid"] is not None or f["gid"] is not None:
            for rel in wanted:
                try:
                    set_attributes(os.path.join(dest_real, *rel.split("/")), None, f["uid"], f["gid"], False)
                except ModuleError as exc:  # a refused chown fails the install as an OSError does
                    raise _install_failed(dest_real, exc.msg, installed, deleted) from None
    except OSError as exc:
        raise _install_failed(dest_real, exc, installed, deleted)
    finally:
        for leftover in staged.values():  # uploads that were not needed: the content is already there
            if isinstance(leftover, str) and os.path.isfile(leftover):
                os.unlink(leftover)
    return installed, deleted


def _install_failed(dest_real: str, why: object, installed: list, deleted: list) -> ModuleError:
    return ModuleError(f"module 'copy': installing into {dest_real} failed: {why}; fix permissions and run again",
                       installed=installed, deleted=deleted)


STAGING = ".dfp-staging"  # the engine's upload folder inside dest (engine/run/actions/files.py)
_STAGED_NAME = r"[0-9a-f]{64}"  # compiled (and cached by re) when a staged folder is checked


def remove_stale_staging(dest: str) -> bool:
    """Remove dest/.dfp-staging left by an upload cut short (a kill between upload and install), only when it is
    provably the engine's: a real folder of this user, mode 0700, holding nothing but files named by a sha256."""
    stage = os.path.join(dest, STAGING)
    try:
        st = os.lstat(stage)
    except OSError:
        return False
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or stat.S_IMODE(st.st_mode) != 0o700:
        return False
    names = os.listdir(stage)
    if not all(re.fullmatch(_STAGED_NAME, n) and stat.S_ISREG(os.lstat(os.path.join(stage, n)).st_mode) for n in names):
        return False
    for n in names:
        os.unlink(os.path.join(stage, n))
    os.rmdir(stage)
    return True


def run_manifest(args: dict, ctx: Context) -> dict:
    f = folder_args(args)
    plan, found = plan_folder(f, args["delete_extra"])
    dest_real, would_change, files = plan["dest"], plan["would_change"], len(f["entries"])
    summary = (
        f"{len(plan['needed'])} to upload, {len(plan['mode_changes'])} mode change(s), {len(plan['extra'])} extra "
        f"of {files} file(s)"
    )
    diff = folder_diff(plan, found, f["wanted"]) if ctx.diff else None
    if args["phase"] == "plan":
        # it changes nothing; in check mode the plan is the answer, so changed says what would change
        changed = would_change if ctx.check else False
        if not ctx.check and remove_stale_staging(dest_real):
            ctx.warn(f"removed {dest_real}/{STAGING}, left by an upload that was cut short")
        return {**plan, "changed": changed, "msg": f"plan for {dest_real}: {summary}"}
    if ctx.check:
        result = {
            **plan,
            "changed": would_change,
            "msg": f"check mode: {dest_real}: would install {summary}" if would_change else f"{dest_real} is as wanted",
        }
        if diff and would_change:
            result["diff"] = diff
        return result
    verify_staged(plan, f)
    installed, deleted = install_folder(plan, f)
    result = {
        **plan,
        "changed": would_change,
        "installed": installed,
        "deleted": deleted,
        "msg": f"{dest_real}: installed {len(installed)}, mode {len(plan['mode_changes'])}, deleted {len(deleted)} "
        f"of {files} file(s)"
        if would_change
        else f"{dest_real} is as wanted ({files} file(s))",
    }
    if diff and would_change:
        result["diff"] = diff
    return result


def run_tree(args: dict, ctx: Context) -> dict:
    """remote_src with a folder as src, as Ansible's copy module: `src/` merges its content into dest, `src` the
    folder itself (dest/NAME); a missing dest ending in / is created first (directory_mode). Nothing is removed."""
    src, dest = os.path.expandvars(args["src"]), os.path.expandvars(args["dest"])
    if os.path.lexists(dest) and not os.path.isdir(dest):
        raise ModuleError(f"module 'copy': src {src} is a folder and dest {dest} is not one; give a folder as dest")
    lookup_uid(args["owner"]), lookup_gid(args["group"])
    changed = False
    if dest.endswith("/") and not os.path.exists(dest):
        if ctx.check:
            return {"changed": True, "src": src, "msg": f"dest directory {dest.rstrip('/')} would be created"}
        make_parents(dest.rstrip("/"), mode_arg(args["directory_mode"], "copy"))
        changed = True
    shown = os.path.join(dest, os.path.basename(src)) if os.path.isdir(dest) else dest

    def chown(path: str) -> bool:
        return set_attributes(path, None, args["owner"], args["group"], ctx.check)

    changed = copy_tree(os.path.join(src, ""), tree_destination(src, dest), args["local_follow"], ctx.check,
                        chown) or changed
    mode = None if args["mode"] == "preserve" else mode_arg(args["mode"], "copy")
    if os.path.exists(shown):
        changed = set_attributes(shown, mode, args["owner"], args["group"], ctx.check) or changed
        changed = attributes.ensure(shown, args["attributes"], ctx.check) or changed
    result = {"dest": shown, "src": src, "md5sum": None, "checksum": None, "changed": changed}
    if os.path.exists(shown):  # Ansible's exit_json adds dest's mode, owner, state and size
        result.update(path_info(shown))
    return result


def run(args: dict, ctx: Context) -> dict:
    if args["manifest"] is not None:
        return run_manifest(args, ctx)
    if args["remote_src"] and args["src"] and os.path.isdir(os.path.expandvars(args["src"])):
        return run_tree(args, ctx)
    return run_file(args, ctx)


if __name__ == "__main__":
    main(ARGS, run)
