"""apt and package (library/apt.py, library/package.py) against real ansible-core's, as root on this Debian machine.

The same sequence of tasks runs by ansible-playbook (its apt respawns under /usr/bin/python3, which has
python3-apt: installed here with apt-get when missing) and by us: check mode of installing an absent package,
present/latest/absent of installed and missing ones, name=version globs and >=, wildcards, Ansible's refusals,
update_cache with cache_valid_time (no update while the lists are recent; check mode when they are not), and a
real install, again, and removal of a tiny .deb built here (dfta-tiny on Ansible's side, dfto-tiny on ours: no
network). Compared per task: failed, changed, msg, and every field Ansible returns with its value (stdout where
both ran the same apt-get). A real install and purge of `sl` from the package mirror is the slow test.
dnf has no host here: its clear refusal, and package's dispatch to apt, are checked on our side."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _ansible_side import registered_by_ansible, registered_by_ours, same_flags  # noqa: E402

from engine.api import run_playbook  # noqa: E402
from tests.helpers import required_ansible_tool  # noqa: E402

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("apt-get") is None,
                                reason="apt-get and dpkg as root (a Debian-family machine)")
DECADE = 315360000
SEQUENCE = [
    ("nothing-asked", {"apt": {}}),
    ("check-install-absent", {"apt": {"name": "sl"}, "check_mode": True}),
    ("present-installed", {"apt": {"name": "bash"}}),
    ("present-glob-installed", {"apt": {"name": "bash=5*"}}),
    ("present-ge-installed", {"apt": {"pkg": "bash>=1.0", "state": "present"}}),
    ("absent-missing", {"apt": {"name": ["P-tiny", "P-absent-pkg"], "state": "absent"}}),
    ("absent-missing-check", {"apt": {"name": "P-tiny", "state": "absent", "purge": True}, "check_mode": True}),
    ("cache-valid", {"apt": {"update_cache": True, "cache_valid_time": DECADE}}),
    ("cache-stale-check", {"apt": {"update_cache": True}, "check_mode": True}),
    ("cache-valid-with-package", {"apt": {"name": "bash", "update_cache": True, "cache_valid_time": DECADE}}),
    ("missing-package", {"apt": {"name": "P-no-such-package"}}),
    ("missing-wildcard", {"apt": {"name": "P-no-such*"}}),
    ("invalid-spec", {"apt": {"name": "bash=1=2"}}),
    ("no-candidate", {"apt": {"name": "bash=0.0.1*"}}),
    ("exclusive", {"apt": {"name": "bash", "upgrade": "dist"}}),
    ("star-with-others", {"apt": {"name": ["*", "bash"], "state": "latest"}}),
    ("deb-check", {"apt": {"deb": "<work>/P-tiny_1.0_all.deb"}, "check_mode": True}),
    ("deb-absent-state", {"apt": {"deb": "<work>/P-tiny_1.0_all.deb", "state": "absent"}}),
    ("deb-install", {"apt": {"deb": "<work>/P-tiny_1.0_all.deb"}}),
    ("deb-again", {"apt": {"deb": "<work>/P-tiny_1.0_all.deb"}}),
    ("present-after-deb", {"apt": {"name": "P-tiny"}}),
    ("version-after-deb", {"apt": {"name": "P-tiny=1.*"}}),
    ("deb-newer-check", {"apt": {"deb": "<work>/P-tiny_2.0_all.deb"}, "check_mode": True}),
    ("package-present", {"package": {"name": "P-tiny"}}),
    ("absent-check", {"apt": {"name": "P-tiny", "state": "absent"}, "check_mode": True}),
    ("absent", {"apt": {"name": "P-tiny", "state": "absent", "purge": True}}),
    ("absent-again", {"apt": {"name": "P-tiny", "state": "absent"}}),
    ("package-absent", {"package": {"name": "P-tiny", "state": "absent"}}),
]
ROOT_PATH = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}  # dpkg needs ldconfig
SAME_STDOUT = {"check-install-absent"}  # both ran the same apt-get --simulate install sl=VERSION


def _task(task: dict, prefix: str, work: Path) -> dict:
    """A task of SEQUENCE for one side: its names and folder, and root's PATH (the harness runs with /usr/bin:/bin)."""
    return dict(_named(task, prefix, work), environment=ROOT_PATH)


def _named(value, prefix: str, work: Path):
    if isinstance(value, str):
        return value.replace("P-", prefix + "-").replace("<work>", str(work))
    if isinstance(value, list):
        return [_named(v, prefix, work) for v in value]
    if isinstance(value, dict):
        return {k: _named(v, prefix, work) for k, v in value.items()}
    return value


def _unnamed(value, prefix: str, work: Path):
    if isinstance(value, str):
        return value.replace(str(work), "<work>").replace(prefix + "-", "P-")
    if isinstance(value, dict):
        return {k: _unnamed(v, prefix, work) for k, v in value.items()}
    if isinstance(value, list):
        return [_unnamed(v, prefix, work) for v in value]
    return value


def build_deb(work: Path, name: str, version: str) -> Path:
    """A tiny architecture-all .deb holding one file, built with dpkg-deb."""
    root = work / f"{name}-{version}"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN" / "control").write_text(
        f"Package: {name}\nVersion: {version}\nArchitecture: all\nMaintainer: Test <test@example.invalid>\n"
        f"Section: misc\nPriority: optional\nDescription: a tiny package for the apt module's tests\n")
    (root / "opt" / name).mkdir(parents=True)
    (root / "opt" / name / "hello").write_text("hello\n")
    out = work / f"{name}_{version}_all.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "--build", str(root), str(out)], check=True,
                   capture_output=True, timeout=120)
    return out


def _purge(*names: str) -> None:
    subprocess.run(["dpkg", "--purge", *names], capture_output=True, timeout=300)


def ensure_python3_apt() -> None:
    """Ansible's apt needs python3-apt for /usr/bin/python3 (it respawns there); installed with apt-get if missing."""
    probe = subprocess.run(["/usr/bin/python3", "-c", "import apt"], capture_output=True, timeout=60)
    if probe.returncode != 0:
        subprocess.run(["apt-get", "install", "-y", "-q", "python3-apt"], check=True, capture_output=True,
                       timeout=1200, env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))


def ours_run(work: Path, tasks: list[tuple[str, dict]]) -> dict:
    return registered_by_ours(work / "ours.yaml", tasks)


def ansible_run(work: Path, tasks: list[tuple[str, dict]]) -> dict:
    ensure_python3_apt()
    home = work / "home"
    home.mkdir(exist_ok=True)
    return registered_by_ansible(required_ansible_tool("ansible-playbook"), home, work, tasks)


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    work = tmp_path_factory.mktemp("apt")
    for prefix in ("dfta", "dfto"):
        for version in ("1.0", "2.0"):
            build_deb(work, f"{prefix}-tiny", version)
    _purge("dfta-tiny", "dfto-tiny")
    try:
        theirs = ansible_run(work, [(cid, _task(t, "dfta", work)) for cid, t in SEQUENCE])
        ours = ours_run(work, [(cid, _task(t, "dfto", work)) for cid, t in SEQUENCE])
    finally:
        _purge("dfta-tiny", "dfto-tiny")
    return ({cid: _unnamed(r, "dfta", work) for cid, r in theirs.items()},
            {cid: _unnamed(r, "dfto", work) for cid, r in ours.items()})


@pytest.mark.parametrize("cid", [c[0] for c in SEQUENCE])
def test_apt_as_ansibles(both, cid):
    theirs, ours = both
    t, o = theirs[cid], ours[cid]
    same_flags(t, o, "failed", "changed")
    if t.get("failed"):
        assert o["msg"] == t["msg"], (t["msg"], o["msg"])
        return
    keys = {k for k in t if not k.startswith("_ansible")} - {"invocation", "changed", "failed", "msg", "warnings"}
    assert keys <= set(o), (sorted(keys - set(o)), t, o)
    for k in keys - {"stdout", "stderr", "stdout_lines", "stderr_lines", "diff"}:
        assert o[k] == t[k], (k, t, o)
    if cid in SAME_STDOUT:
        assert o["stdout"] == t["stdout"], (t, o)


def test_dnf_refused_where_there_is_none(tmp_path):
    if shutil.which("dnf") or shutil.which("dnf5"):
        pytest.skip("this machine has dnf")
    ours = ours_run(tmp_path, [("dnf", {"dnf": {"name": "curl"}}),
                               ("dnf-check", {"dnf": {"name": "curl", "state": "latest"}, "check_mode": True}),
                               ("package-dnf", {"package": {"name": "curl", "use": "dnf"}})])
    for cid in ("dnf", "dnf-check", "package-dnf"):
        assert ours[cid]["failed"] and "this host has no dnf" in ours[cid]["msg"], ours[cid]
        assert "Use apt on Debian/Ubuntu hosts" in ours[cid]["msg"]


def test_dnf_and_package_arguments_checked_when_the_playbook_loads(tmp_path):
    for task, words in [({"dnf": {"name": "curl", "state": "purged"}}, "state"),
                        ({"dnf": {"name": "curl", "download_only": True}}, "download_only"),
                        ({"apt": {"name": "curl", "install_weak_deps": False}}, "install_weak_deps"),
                        ({"package": {"name": "curl", "nonsense": 1}}, "nonsense")]:
        book = tmp_path / "book.yaml"
        book.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": [task]}]))
        run = run_playbook(str(book), inventory={"all": {"hosts": {"h": {"ansible_connection": "local"}}}})
        assert run.error and words in str(run.error), (task, run.error)
        assert not run.results


def test_package_passes_on_to_apt_here(tmp_path):
    ours = ours_run(tmp_path, [("pkg-dnf-option", {"package": {"name": "bash", "install_weak_deps": False}}),
                               ("pkg-apt-option", {"package": {"name": "bash", "cache_valid_time": DECADE}})])
    assert ours["pkg-dnf-option"]["failed"] and "install_weak_deps" in ours["pkg-dnf-option"]["msg"]
    assert ours["pkg-apt-option"]["changed"] is False and "cache_update_time" in ours["pkg-apt-option"]


@pytest.mark.slow
def test_real_install_and_purge_from_the_mirror(tmp_path):
    """sl installed for real (apt-get fetches it), again (changed false), purged: ours, then Ansible's same steps."""
    if subprocess.run(["dpkg-query", "-W", "sl"], capture_output=True).returncode == 0:
        pytest.skip("sl is installed on this machine: the test would remove it")
    steps = [(cid, dict(task, environment=ROOT_PATH)) for cid, task in [
        ("install", {"apt": {"name": "sl", "install_recommends": False}}),
        ("again", {"apt": {"name": "sl"}}),
        ("purge", {"apt": {"name": "sl", "state": "absent", "purge": True}}),
        ("purge-again", {"apt": {"name": "sl", "state": "absent", "purge": True}})]]
    try:
        ours = ours_run(tmp_path, steps)
        theirs = ansible_run(tmp_path, steps)
    finally:
        _purge("sl")
    for cid, _task in steps:
        assert not ours[cid]["failed"] and not theirs[cid].get("failed"), (theirs[cid], ours[cid])
        assert ours[cid]["changed"] == theirs[cid]["changed"], (cid, theirs[cid], ours[cid])
        assert set(theirs[cid]) - {"invocation", "changed", "failed", "_ansible_no_log"} <= set(ours[cid])
