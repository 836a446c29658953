"""A real HF-compatible server (olah) on loopback for the models tests, one per session."""

from __future__ import annotations

import os

import pytest

from tests.fakes.hub import LocalHub, olah_cli


@pytest.fixture(scope="session")
def hub(tmp_path_factory):
    if olah_cli() is None:
        if os.environ.get("CI"):
            pytest.fail("CI must run the models tests: olah is not installed (requirements-test.txt)")
        pytest.skip("olah is not installed (pip install -r requirements-test.txt)")
    local = LocalHub(tmp_path_factory.mktemp("hub")).start()
    yield local
    local.stop()
