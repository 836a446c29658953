"""Fixtures shared by the engine tests."""

from __future__ import annotations

import pytest


@pytest.fixture(params=["local", "ssh"])
def target(request, inventory_file, shared_tmp):
    """(inventory path, a folder on the host the run may write) for each transport."""
    if request.param == "local":
        return inventory_file(local=True), shared_tmp
    hosts = request.getfixturevalue("ssh_hosts")
    return inventory_file(hosts=hosts[:1]), shared_tmp
