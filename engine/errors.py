"""Error types that cross stage boundaries."""

from __future__ import annotations


class UserError(Exception):
    """Bad input from the person running the tool: printed as one paragraph, no traceback.

    The message names the file, the place and the fix. Raised before any host is changed.
    """

    exit_code = 4


class HostUnreachable(Exception):
    """A host could not be reached (after retries) or refused us (auth, host key)."""


class TaskError(Exception):
    """A task could not be prepared for one host (e.g. an undefined variable in its arguments)."""
