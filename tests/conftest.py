"""Shared fixtures: real sshd hosts on loopback, inventories, the local host."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # engine, dflash_host (helpers) and library (task modules, as library.NAME)
# The drafter config fixtures' helpers (make_checkpoint) are imported directly in tests.
_FIXTURES = str(ROOT / "tests" / "fixtures" / "drafter_configs")
if _FIXTURES not in sys.path:
    sys.path.append(_FIXTURES)

from tests import sshd_harness  # noqa: E402
from tests.fakes.hub import LocalHub, ensure_olah  # noqa: E402
from tests.helpers import isolate_pip  # noqa: E402
from tests.sshd_harness import SshdPool, write_inventory  # noqa: E402,F401


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: takes more than a few seconds")
    config.addinivalue_line("markers", "e2e: end-to-end with a real vLLM on CPU")
    config.addinivalue_line("markers", "ssh: needs the real sshd harness (root, openssh-server)")
    config.addinivalue_line("markers", "ansible_targets: ansible-core's own integration targets, both tools")


@pytest.fixture(autouse=True)
def _vault_secrets_per_test():
    """Each test is one run, as a CLI process is: a value another test decrypted (a vault's "5") is not its secret."""
    from engine.parsing import vault, yamlfile

    vault.forget_revealed()
    yamlfile.forget_loaded()
    yield


@pytest.fixture(scope="session")
def sshd_pool():
    reason = sshd_harness.available()
    if reason:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the real sshd tests: {reason}")
        pytest.skip(reason)
    pool = SshdPool(count=9).start()
    yield pool
    pool.stop()
    from engine.connection import persist
    persist.stop()  # the connections the runs kept (the default) to the hosts just stopped


@pytest.fixture(scope="session")
def ssh_hosts(sshd_pool):
    """Nine real sshd hosts (h1..h9 on 127.0.0.2-10, a free port per session), one non-root user with an empty home."""
    return sshd_pool.hosts


@pytest.fixture
def ssh_host(ssh_hosts):
    return ssh_hosts[0]


@pytest.fixture
def clean_pip_config(monkeypatch):
    """This machine's pip and uv configuration (find-links, indexes, an active venv) kept out of the test's builds."""
    isolate_pip(monkeypatch)


@pytest.fixture
def local_host():
    return {"ansible_connection": "local"}


@pytest.fixture
def inventory_file(tmp_path):
    """write(hosts=[...], vars={...}, local=True) -> path of a fresh inventory in tmp_path."""

    def write(hosts=None, vars=None, host_vars=None, local=False, groups=None, name="inventory.yaml"):
        return write_inventory(tmp_path / name, hosts, vars, host_vars, local, groups)

    return write


@pytest.fixture
def shared_tmp(tmp_path):
    """A temp folder the ssh test user can read and write (pytest's own is root-only)."""
    import shutil
    import tempfile

    d = Path(tempfile.mkdtemp(prefix="dfp-test-"))
    os.chmod(d, 0o777)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def remote_host(ssh_host, inventory_file, shared_tmp):
    """One real sshd host (`.name`) and an inventory of it alone (`.inventory`): a machine other than the control
    node, so what it answers is another machine's word (engine/run/trust.py); a local host's is the control node's."""
    from types import SimpleNamespace

    inv = inventory_file(hosts=[ssh_host], host_vars={ssh_host.name: {"dfp_root": str(shared_tmp / "root")}},
                         name="remote-inventory.yaml")
    return SimpleNamespace(name=ssh_host.name, inventory=str(inv))


@pytest.fixture
def gpu():
    """A stand-in nvidia-smi (tests/fakes/nvidia-smi) whose GPU holders are real processes the test starts."""
    from tests.fakes.gpu_holder import FakeGpu

    fake = FakeGpu()
    yield fake
    fake.cleanup()


@pytest.fixture(scope="session")
def hub(tmp_path_factory):
    """A real HF-compatible server (olah, offline, over local git repositories) on loopback, one per session."""
    try:
        ensure_olah()
    except (OSError, subprocess.CalledProcessError) as exc:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the models tests: olah could not be installed ({exc})")
        pytest.skip(f"olah could not be installed into its own venv ({exc})")
    local = LocalHub(tmp_path_factory.mktemp("hub")).start()
    yield local
    local.stop()


@pytest.fixture
def kept_connections(monkeypatch):
    """Kept connections (ControlPersist) of the test's own: the daemon's socket folder under a short private path
    (XDG_RUNTIME_DIR), the daemon stopped at the end. Yields that folder."""
    import shutil
    import tempfile

    from engine.connection import persist
    from tests.helpers import daemon_pid, wait_gone

    base = Path(tempfile.mkdtemp(prefix="dfp-rt-", dir="/tmp"))
    folder = base / "dflash-provision"
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(base))
    yield folder
    pid = daemon_pid(folder)
    if folder.is_dir():
        os.chmod(folder, 0o700)  # a test may have opened it
    persist.stop()
    if pid:
        wait_gone(pid)
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def uv_tool(tmp_path_factory):
    """A real uv, installed the way the module does it (pip --target into a tool folder)."""
    tool = tmp_path_factory.mktemp("tools")
    from tests.helpers import install_uv

    install_uv(tool)
    return str(tool)
