"""A file's MIME type and charset as Ansible's stat get_mime reports them: the `file` program's
--mime-type --mime-encoding when the host has it, else Python's guess from the name (charset "unknown")."""

from __future__ import annotations

import mimetypes
import shutil
import subprocess


def mime_of(path: str) -> tuple[str, str]:
    """(mimetype, charset); ("unknown", "unknown") when neither way knows."""
    tool = shutil.which("file")
    if tool is not None:
        try:
            proc = subprocess.run([tool, "--mime-type", "--mime-encoding", "--", path], capture_output=True,
                                  text=True, timeout=30, stdin=subprocess.DEVNULL)
            if proc.returncode == 0 and ";" in proc.stdout:
                kind, charset = proc.stdout.rsplit(":", 1)[1].split(";", 1)
                return kind.strip(), charset.split("=", 1)[-1].strip()
        except (OSError, subprocess.TimeoutExpired, ValueError):
            pass
        return "unknown", "unknown"
    guessed, _encoding = mimetypes.guess_type(path)
    return guessed or "unknown", "unknown"
