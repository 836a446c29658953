"""Local users and groups as Ansible's user and group modules manage them on Linux: read through pwd/grp and
/etc/shadow, changed through useradd/usermod/userdel and groupadd/groupmod/groupdel (shadow-utils). A command is
run only outside check mode; a password never reaches a message."""

from __future__ import annotations

import grp
import os
import pwd
import subprocess

from dflash_host.module import ModuleError

SBIN = ("/usr/sbin", "/sbin", "/usr/local/sbin")


def tool(name: str) -> str:
    """The shadow-utils program's path; a host without it fails naming the package."""
    import shutil

    found = shutil.which(name, path=os.pathsep.join([os.environ.get("PATH", os.defpath), *SBIN]))
    if found is None:
        raise ModuleError(f"Failed to find required executable \"{name}\" in paths: {':'.join(SBIN)}; install the "
                          "host's shadow-utils (Debian: passwd, RHEL: shadow-utils)")
    return found


def run(argv: list[str], check: bool, secret: str | None = None) -> tuple[int, str, str]:
    """(rc, stdout, stderr) of the program, or (0, "", "") in check mode; `secret` is masked in what comes back."""
    if check:
        return 0, "", ""
    proc = subprocess.run([tool(argv[0]), *argv[1:]], capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          timeout=300)
    out, err = proc.stdout, proc.stderr
    if secret:
        out, err = out.replace(secret, "********"), err.replace(secret, "********")
    return proc.returncode, out, err


def user(name: str) -> pwd.struct_passwd | None:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        return None


def group(name_or_gid: str | int) -> grp.struct_group | None:
    """A group by name, or by gid when given as a number (Ansible's group_info)."""
    try:
        if isinstance(name_or_gid, int) or str(name_or_gid).isdigit():
            return grp.getgrgid(int(name_or_gid))
        return grp.getgrnam(str(name_or_gid))
    except KeyError:
        try:
            return grp.getgrnam(str(name_or_gid))
        except KeyError:
            return None


def member_of(name: str) -> list[str]:
    """The groups listing the user as a member (the primary group only where it lists the user too)."""
    return [g.gr_name for g in grp.getgrall() if name in g.gr_mem]


def shadow_hash(name: str) -> str:
    """The user's password hash from /etc/shadow ('' when it cannot be read)."""
    try:
        with open("/etc/shadow", encoding="utf-8") as fh:
            for line in fh:
                fields = line.rstrip("\n").split(":")
                if fields[0] == name and len(fields) > 1:
                    return fields[1]
    except OSError:
        pass
    return ""
