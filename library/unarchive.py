"""Unpack a tar (plain, gz, bz2, xz) or zip archive into an existing folder (ansible.builtin.unarchive).

`src` is a file on the host with remote_src: true (or a URL there, downloaded first); else the engine uploads
the control-node file (engine/run/actions/files.py, as copy's src) and runs this on the upload. As Ansible's:
`creates` that exists skips the task ("skipped, since P exists"); dest must be an existing folder; nothing is
written when dest holds every member already (gtar --diff's rule: kind, size, content, mtime, mode and, as root,
owner), else all members are extracted; mode/owner/group then set on each member and top folder; check mode
says whether it would extract (a tar archive: skipped, as Ansible's does with gtar). include/exclude (fnmatch
patterns), keep_newer, list_files (`files`), extra_opts limited to --strip-components=N. Results as Ansible's:
handler (TarArchive for every tar, as GNU tar finds the compression itself; ZipArchive), dest, src, extract_results (cmd, rc,
out, err) when it extracted, files, and dest's uid, gid, owner, group, mode, state, size.

Differs on purpose: tarfile and zipfile read the archive (no gtar or unzip on the host), so extract_results' cmd
names that; a member that would land or point outside dest (absolute, '..', a symlink out, a hard link to a file
not in the archive) or a device node is refused before anything is written (gtar strips or warns). The helpers
are dflash_host/host/archives.py; tests/library/test_unarchive_against_ansible.py runs both.
"""

from __future__ import annotations

import os

from dflash_host.host import archives, download, fileattrs
from dflash_host.module import Context, ModuleError, main

ARGS = {
    "src": {"type": "path", "required": True,
            "help": "the archive: a control-node file (uploaded), or with remote_src a host path or URL"},
    "dest": {"type": "path", "required": True, "help": "an existing folder to unpack into"},
    "remote_src": {"type": "bool", "default": False, "help": "src is on the host already (or a URL it downloads)"},
    "copy": {"type": "bool", "default": None, "help": "Ansible's old spelling: copy: false is remote_src: true"},
    "creates": {"type": "path", "default": None, "help": "a path: when it exists, the task is skipped"},
    "list_files": {"type": "bool", "default": False, "help": "answer the archive's member names as `files`"},
    "keep_newer": {"type": "bool", "default": False, "help": "leave files in dest newer than the archive's"},
    "exclude": {"type": "list", "default": [], "help": "members (fnmatch patterns) not unpacked"},
    "include": {"type": "list", "default": [], "help": "only these members (fnmatch patterns) unpacked"},
    "extra_opts": {"type": "list", "default": [], "help": "only --strip-components=N (or the pair) is taken"},
    "validate_certs": {"type": "bool", "default": True, "help": "a URL src: false accepts any TLS certificate"},
    "io_buffer_size": {"type": "int", "default": 65536, "help": "accepted (reads go in 1 MiB chunks)"},
    "decrypt": {"type": "bool", "default": True, "help": "the engine's: a vault-encrypted control-node src is decrypted"},
    "_groups": ("file_attributes",),
}
# The arguments that decide what runs or which file, folder or address is touched (engine/run/trust.py).
CODE_ARGS = ("src", "dest", "creates")


def strip_components(opts: list) -> int:
    """extra_opts as this tool takes them: --strip-components=N (or the two words); others refused."""
    words, count, i = [str(o) for o in opts], 0, 0
    while i < len(words):
        word = words[i]
        value = word.partition("=")[2] if word.startswith("--strip-components=") else None
        if word == "--strip-components" and i + 1 < len(words):
            value, i = words[i + 1], i + 1
        if value is None or not value.isdigit():
            raise ModuleError(f"unarchive: extra_opts {word!r} is not taken here (the archive is read with Python's "
                              "tarfile/zipfile, not gtar); only --strip-components=N is, drop the others or use "
                              "include/exclude")
        count, i = int(value), i + 1
    return count


def source(args: dict, ctx: Context) -> tuple[str, str | None]:
    """(the archive's path on the host, a downloaded temp file to remove after or None)."""
    src = args["src"]
    if os.path.exists(src):
        return os.path.abspath(src), None
    if not args["remote_src"]:
        raise ModuleError(f"Source '{src}' failed to transfer")
    if "://" not in src:
        raise ModuleError(f"Source '{src}' does not exist")
    path, info = download.fetch(src, {"validate_certs": args["validate_certs"], "timeout": 10})
    if path is None or info["status"] != 200:
        if path:
            os.unlink(path)
        raise ModuleError(f"Failure downloading {download.mask_url(src)}, {info['msg']}")
    return path, path


def check_src(src: str) -> None:
    if not os.access(src, os.R_OK):
        raise ModuleError(f"Source '{src}' not readable")
    if os.path.getsize(src) == 0:
        raise ModuleError(f"Invalid archive '{src}', the file is 0 bytes")


def set_attributes(names: list, dest: str, args: dict) -> bool:
    """mode/owner/group on each member and on each top folder, as Ansible's: changed when any was set."""
    mode = fileattrs.mode_arg(args["mode"], "unarchive")
    changed = False
    tops = []
    for name in names:
        changed = fileattrs.set_attributes(os.path.join(dest, name), mode, args["owner"], args["group"], False) or changed
        top = name.split("/")[0]
        if "/" in name.rstrip("/") and top not in tops:
            tops.append(top)
    for top in tops:
        changed = fileattrs.set_attributes(os.path.join(dest, top), mode, args["owner"], args["group"], False) or changed
    return changed


def run(args: dict, ctx: Context) -> dict:
    if args["copy"] is False:
        args["remote_src"] = True
    if args["include"] and args["exclude"]:
        raise ModuleError("parameters are mutually exclusive: include|exclude")
    if args["creates"] and os.path.exists(args["creates"]):
        return {"skipped": True, "changed": False, "msg": f"skipped, since {args['creates']} exists"}
    dest = args["dest"]
    if not os.path.isdir(dest):
        raise ModuleError(f"dest '{dest}' must be an existing dir")
    if not os.path.isabs(dest):
        ctx.warn(f"Relative destination path '{dest}' was resolved to absolute path '{os.path.abspath(dest)}'.")
    components = strip_components(args["extra_opts"])
    src, downloaded = source(args, ctx)
    try:
        return unpack(src, dest, components, args, ctx)
    finally:
        if downloaded:
            os.unlink(downloaded)


def unpack(src: str, dest: str, components: int, args: dict, ctx: Context) -> dict:
    check_src(src)
    handler, archive = archives.open_archive(src)
    with archive:
        found = archives.members(archive, components, args["include"], args["exclude"])
        if not any(m.kind != "none" for m in found):
            raise ModuleError(f"Failed to find handler for \"{src}\". Make sure the required command to extract the "
                              "file is installed.\nthe archive holds no members to extract (empty archives are not "
                              "supported)")
        if ctx.check and handler != "ZipArchive":
            return {"skipped": True, "changed": False,
                    "msg": "remote module (ansible.legacy.unarchive) does not support check mode when using gtar"}
        archives.check_safe(found, dest)
        attrs = {k: args[k] for k in ("mode", "owner", "group")}
        there = all(archives.differs(m, dest, archive, attrs) is None for m in found)
        result: dict = {"handler": handler, "dest": dest, "src": src, "changed": not there}
        if not there and not ctx.check:
            cmd = ["python3-" + ("zipfile" if handler == "ZipArchive" else "tarfile"), "--extract", "-C", dest,
                   "-f", src]
            try:
                archives.extract(archive, found, os.path.abspath(dest), args["keep_newer"])
            except OSError as exc:
                raise ModuleError(f"Failed to unpack {src!r} to {dest!r}: {exc}", handler=handler, dest=dest,
                                  src=src) from None
            result["extract_results"] = {"cmd": cmd, "rc": 0, "out": "", "err": ""}
        listed = [m.name + ("/" if m.kind == "dir" else "") for m in found]
        written = [name for name, m in zip(listed, found) if m.kind != "none"]
        if not ctx.check:
            result["changed"] = set_attributes(written, dest, args) or result["changed"]
    if args["list_files"]:
        result["files"] = listed
    return {**result, **fileattrs.path_info(dest)}


if __name__ == "__main__":
    main(ARGS, run)
