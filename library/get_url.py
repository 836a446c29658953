"""Download a file from an HTTP(S), FTP or file: URL to the host (ansible.builtin.get_url).

`dest` a file, or a folder (the name from the answer's Content-Disposition, else the URL's last part, as
Ansible's). Idempotent as Ansible's: a dest that exists with the `checksum` given (ALGO:HEX, or ALGO:URL of a
checksum file in sha256sum or BSD form) and force: false is not downloaded ("file already exists"); otherwise an
existing dest is asked for with If-Modified-Since (a 304 answer: changed false) and replaced only when the sha1
of what came differs; force: true asks without it (cache-control: no-cache). The download is checked against
the checksum before it replaces dest (atomically, `backup` keeping the old file). mode/owner/group as the file
module's. Check mode sends a HEAD request and changes nothing. Result fields as Ansible's: dest, url (user-info
masked), checksum_src, checksum_dest (sha1), md5sum, status_code, msg ("OK (N bytes)"), elapsed (whole
seconds), src (the temp file, gone by then), backup_file, and dest's uid, gid, owner, group, mode, state, size.

Every read of the answer is bounded by `timeout` (a stalled server fails the task, never hangs it).
url_password (and a password in the URL) is a secret: never in a result or message. Ansible's ciphers,
client_cert/client_key, use_gssapi and the SELinux options are not arguments (refused when the playbook loads);
use_netrc is accepted, ~/.netrc is not read. tests/library/test_get_url_against_ansible.py runs both against
an http.server on 127.0.0.1.
"""

from __future__ import annotations

import email.message
import hashlib
import os
import re
import time
import urllib.parse

from dflash_host.host import download, fileattrs
from dflash_host.host.files import backup_name
from dflash_host.module import Context, ModuleError, main

ARGS = {
    "url": {"type": "str", "required": True, "help": "http://, https://, ftp:// or file:// URL"},
    "dest": {"type": "path", "required": True,
             "help": "the file to write, or a folder (the file's name then comes from the answer or the URL)"},
    "checksum": {"type": "str", "default": "",
                 "help": "ALGORITHM:HEX (sha256:...) or ALGORITHM:URL of a checksum file; dest with it is not "
                         "downloaded again (force: false), a download without it fails"},
    "force": {"type": "bool", "default": False,
              "help": "download every time (no If-Modified-Since) and replace dest when the content differs"},
    "backup": {"type": "bool", "default": False, "help": "keep the old dest as DEST.PID.DATE@TIME~ (backup_file)"},
    "timeout": {"type": "int", "default": 10, "help": "seconds each connect and each read may take"},
    "headers": {"type": "dict", "default": None, "help": "request headers"},
    "tmp_dest": {"type": "path", "default": None, "help": "an existing folder for the temporary download"},
    "url_username": {"type": "str", "default": None, "help": "user for HTTP basic (or digest) authentication"},
    "username": {"type": "str", "default": None, "alias_of": "url_username", "help": "alias of url_username"},
    "url_password": {"type": "str", "default": None, "help": "its password (a secret: never printed)"},
    "password": {"type": "str", "default": None, "alias_of": "url_password", "help": "alias of url_password"},
    "force_basic_auth": {"type": "bool", "default": False,
                         "help": "send basic authentication at once (not after a 401 challenge)"},
    "validate_certs": {"type": "bool", "default": True, "help": "false: accept any TLS certificate"},
    "use_proxy": {"type": "bool", "default": True, "help": "false: ignore the proxy environment variables"},
    "http_agent": {"type": "str", "default": "ansible-httpget", "help": "the User-Agent header"},
    "unredirected_headers": {"type": "list", "default": [], "help": "headers not sent on to a redirect"},
    "decompress": {"type": "bool", "default": True, "help": "accepted (a gzip answer is kept as it came)"},
    "use_netrc": {"type": "bool", "default": True, "help": "accepted; ~/.netrc is not read"},
    "_groups": ("file_attributes",),
}
# The arguments that decide what runs or which file, folder or address is touched (engine/run/trust.py).
CODE_ARGS = ("url", "dest", "tmp_dest", "checksum")
DIGEST_LINE_BSD = re.compile(r"^(\w+) ?\((?P<path>.+)\) ?= (?P<digest>[\w.]+)$")
DIGEST_LINE_GNU = re.compile(r"^(?P<digest>[\w.]+)\s+(\*|\./|\.)?(?P<path>.+)$")


class Finished(Exception):
    """The task's answer, reached early (Ansible's exit_json / fail_json mid-way)."""

    def __init__(self, result: dict) -> None:
        super().__init__(result.get("msg", ""))
        self.result = result


def url_filename(url: str) -> str:
    return os.path.basename(urllib.parse.urlsplit(url).path) or "index.html"


def header_filename(info: dict) -> str | None:
    """The file name a Content-Disposition header gives (its last part only: no way out of dest's folder)."""
    msg = email.message.Message()
    msg["content-disposition"] = info.get("content-disposition", "")
    name = msg.get_param("filename", header="content-disposition")
    return os.path.basename(str(name)) if name else None


def digest_of(path: str, algorithm: str) -> str:
    try:
        digest = hashlib.new(algorithm)
    except (ValueError, TypeError):
        names = ", ".join(sorted(hashlib.algorithms_available))
        raise ModuleError(f"Could not hash file '{path}' with algorithm '{algorithm}'. Available algorithms: "
                          f"{names}") from None
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def sha1_of(path: str) -> str:
    return digest_of(path, "sha1")


def parse_digest_lines(filename: str, lines: list[str]) -> list[tuple[str, str]]:
    """(digest, file name) pairs of a checksum file: one bare digest, or sha256sum's or BSD's lines."""
    if len(lines) == 1 and len(lines[0].split()) == 1:
        return [(lines[0], filename)]
    pairs = []
    for line in lines:
        match = DIGEST_LINE_BSD.match(line) or DIGEST_LINE_GNU.match(line)
        if match:
            pairs.append((match.group("digest"), match.group("path")))
    return pairs


def parse_checksum(args: dict, result: dict, ctx: Context) -> tuple[str, str]:
    """(algorithm, hex digest), both empty without a checksum; a checksum URL's file is fetched and read."""
    given = args["checksum"]
    if not given:
        return "", ""
    if ":" not in given:
        raise Finished({**result, "failed": True,
                        "msg": "The checksum parameter has to be in format <algorithm>:<checksum>"})
    algorithm, value = given.split(":", 1)
    if urllib.parse.urlsplit(value).scheme in download.SCHEMES:
        value = checksum_from_url(args, value, result)
    value = re.sub(r"\W+", "", value).lower()
    try:
        int(value, 16)
    except ValueError:
        raise Finished({**result, "failed": True, "msg": "The checksum format is invalid"}) from None
    return algorithm, value


def checksum_from_url(args: dict, checksum_url: str, result: dict) -> str:
    path, info = download.fetch(checksum_url, args, folder=args["tmp_dest"])
    if path is None:
        raise Finished(request_failed(info, checksum_url, args["dest"]))
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            lines = [line.rstrip("\n") for line in fh]
    finally:
        os.unlink(path)
    filename = url_filename(args["url"])
    for digest, name in parse_digest_lines(filename, lines):
        if name == filename:
            return digest
    raise Finished({**result, "failed": True, "msg": f"Unable to find a checksum for file '{filename}' in "
                                                     f"'{download.mask_url(checksum_url)}'"})


def request_failed(info: dict, url: str, dest: str, elapsed: int = 0) -> dict:
    """Ansible's url_get answers: no answer (status -1: its message), a non-200 status ("Request failed")."""
    base = {"failed": True, "url": download.mask_url(url), "dest": dest, "elapsed": elapsed, "changed": False}
    if info["status"] == -1:
        return {**base, "msg": info["msg"]}
    return {**base, "msg": "Request failed", "status_code": info["status"], "response": info["msg"]}


def attributes(args: dict, path: str, check: bool) -> bool:
    mode = fileattrs.mode_arg(args["mode"], "get_url")
    return fileattrs.set_attributes(path, mode, args["owner"], args["group"], check)


def check_tmp_dest(folder: str | None) -> None:
    if folder and not os.path.isdir(folder):
        what = "is a file but should be a directory." if os.path.exists(folder) else "directory does not exist."
        raise Finished({"failed": True, "changed": False, "msg": f"{folder} {what}", "elapsed": 0})


def existing_dest(args: dict, dest: str, algorithm: str, checksum: str, result: dict, ctx: Context) -> tuple:
    """(If-Modified-Since time or None, force): a dest whose checksum matches ends the task here."""
    if os.path.isdir(dest) or not os.path.exists(dest):
        return None, args["force"]
    if not args["force"] and checksum:
        if digest_of(dest, algorithm) == checksum:
            changed = attributes(args, dest, ctx.check)
            msg = "file already exists but file attributes changed" if changed else "file already exists"
            raise Finished({**result, "changed": changed, "msg": msg})
        return os.path.getmtime(dest), True  # a mismatch: downloaded again whatever the server's time says
    return os.path.getmtime(dest), args["force"]


def check_incomplete(tmpsrc: str, info: dict, args: dict, check: bool) -> None:
    """A body shorter than its Content-Length (an answer cut off): Ansible's failure."""
    if check or "content-length" not in info or (info.get("content-encoding") == "gzip" and args["decompress"]):
        return
    size, length = os.path.getsize(tmpsrc), int(info["content-length"])
    if size != length:
        os.unlink(tmpsrc)
        raise Finished({"failed": True, "changed": False,
                        "msg": f"Incomplete read, (cl={length}, st.st_size={size}) failed to read remaining "
                               f"{length - size} bytes"})


def check_dest_writable(dest: str, tmpsrc: str, result: dict) -> None:
    if os.path.exists(dest):
        for flag, word in ((os.W_OK, "writable"), (os.R_OK, "readable")):
            if not os.access(dest, flag):
                os.unlink(tmpsrc)
                raise Finished({**result, "failed": True, "msg": f"Destination {dest} is not {word}"})
        result["checksum_dest"] = sha1_of(dest)
        return
    folder = os.path.dirname(dest)
    if not os.path.exists(folder):
        os.unlink(tmpsrc)
        raise Finished({**result, "failed": True, "msg": f"Destination {folder} does not exist"})
    if not os.access(folder, os.W_OK):
        os.unlink(tmpsrc)
        raise Finished({**result, "failed": True, "msg": f"Destination {folder} is not writable"})


def place(tmpsrc: str, dest: str, args: dict, result: dict) -> None:
    """The download at dest (renamed when on the same filesystem, else copied through a temp file there)."""
    import shutil
    try:
        if args["backup"] and os.path.exists(dest):
            result["backup_file"] = backup_name(dest, "ansible")
            shutil.copy2(dest, result["backup_file"])
        mode = os.stat(dest).st_mode & 0o7777 if os.path.exists(dest) else 0o666 & ~fileattrs.current_umask()
        staged = f"{os.path.dirname(dest)}/.{os.path.basename(dest)}.dfp-{os.getpid()}"
        shutil.move(tmpsrc, staged)
        os.chmod(staged, mode)
        os.replace(staged, dest)
    except OSError as exc:
        for leftover in (tmpsrc, locals().get("staged")):
            if leftover and os.path.exists(leftover):
                os.unlink(leftover)
        raise Finished({**result, "failed": True, "msg": f"failed to copy {tmpsrc} to {dest}: {exc}"}) from None


def download_to(args: dict, dest: str, algorithm: str, checksum: str, result: dict, ctx: Context) -> dict:
    last_mod, force = existing_dest(args, dest, algorithm, checksum, result, ctx)
    start = time.monotonic()
    tmpsrc, info = download.fetch(args["url"], {**args, "force": force}, "HEAD" if ctx.check else "GET", last_mod,
                                  args["tmp_dest"])
    elapsed = int(time.monotonic() - start)
    if info["status"] == 304:
        return {"url": download.mask_url(args["url"]), "dest": dest, "changed": False, "msg": info["msg"],
                "status_code": 304, "elapsed": elapsed}
    if tmpsrc is None or (info["status"] != 200 and urllib.parse.urlsplit(args["url"]).scheme in ("http", "https")):
        if tmpsrc:
            os.unlink(tmpsrc)
        raise Finished(request_failed(info, args["url"], dest, elapsed))
    check_incomplete(tmpsrc, info, args, ctx.check)
    result.update(elapsed=elapsed, src=tmpsrc)
    if os.path.isdir(dest):
        dest = os.path.join(dest, header_filename(info) or url_filename(info["url"]))
        result["dest"] = dest
    result["checksum_src"] = sha1_of(tmpsrc)
    check_dest_writable(dest, tmpsrc, result)
    if ctx.check:
        os.unlink(tmpsrc)
        result["changed"] = result["checksum_dest"] is None or result["checksum_src"] != result["checksum_dest"]
        return {**result, "msg": info["msg"]}
    if checksum and digest_of(tmpsrc, algorithm) != checksum:
        got = digest_of(tmpsrc, algorithm)
        os.unlink(tmpsrc)
        raise Finished({**result, "failed": True,
                        "msg": f"The checksum for {tmpsrc} did not match {checksum}; it was {got}."})
    result["changed"] = result["checksum_src"] != result["checksum_dest"]
    if result["changed"]:
        place(tmpsrc, dest, args, result)
    else:
        os.unlink(tmpsrc)
    result["changed"] = attributes(args, dest, False) or result["changed"]
    result["md5sum"] = digest_of(dest, "md5")
    return {**result, "msg": info["msg"], "status_code": info["status"]}


def run(args: dict, ctx: Context) -> dict:
    dest = args["dest"]
    result = {"changed": False, "checksum_dest": None, "checksum_src": None, "dest": dest, "elapsed": 0,
              "url": download.mask_url(args["url"])}
    try:
        check_tmp_dest(args["tmp_dest"])
        algorithm, checksum = parse_checksum(args, result, ctx)
        answer = download_to(args, dest, algorithm, checksum, result, ctx)
    except Finished as done:
        answer = done.result
    if answer.get("failed"):
        data = {**{k: v for k, v in answer.items() if k not in ("failed", "msg")},
                **fileattrs.path_info(answer.get("dest") or dest)}
        raise ModuleError(answer["msg"], **data)
    return {**answer, **fileattrs.path_info(answer["dest"])}


if __name__ == "__main__":
    main(ARGS, run)
