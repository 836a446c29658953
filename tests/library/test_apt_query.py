"""dflash_host/host/apt_query.py on this machine's real apt and dpkg: Debian version order against
`dpkg --compare-versions`, and `apt-cache policy` read into the candidate and the known versions."""

from __future__ import annotations

import shutil
import subprocess
import time

import pytest

from dflash_host.host import apt_query

pytestmark = pytest.mark.skipif(shutil.which("dpkg") is None, reason="dpkg (a Debian-family machine)")
PAIRS = [("1.0", "1.0~rc1"), ("1:0.9", "2.0"), ("5.2.15-2+b8", "5.2.15-2+b13"), ("1.0a", "1.0"), ("1.0-1", "1.0"),
         ("2.0", "10.0"), ("1.0~~", "1.0~"), ("1.0-1", "1.0-1"), ("1.0.1", "1.0a"), ("0:1.0", "1.0"),
         ("1.0+dfsg-1", "1.0-1"), ("2:1", "1:9"), ("1.0-1ubuntu1", "1.0-1"), ("a", "b"), ("1.001", "1.1"),
         ("1.2-3.4", "1.2-3.10")]


def dpkg_order(a: str, b: str) -> int:
    for op, answer in (("lt", -1), ("eq", 0)):
        if subprocess.run(["dpkg", "--compare-versions", a, op, b], timeout=30).returncode == 0:
            return answer
    return 1


@pytest.mark.parametrize(("a", "b"), PAIRS)
def test_version_order_is_dpkgs(a, b):
    assert apt_query.version_cmp(a, b) == dpkg_order(a, b)
    assert apt_query.version_cmp(b, a) == -dpkg_order(a, b)


def test_policy_reads_the_candidate_and_versions():
    text = ("bash:\n  Installed: 5.2.15-2+b8\n  Candidate: 5.2.15-2+b13\n  Version table:\n"
            "     5.2.15-2+b13 500\n        500 http://deb.debian.org/debian bookworm/main amd64 Packages\n"
            " *** 5.2.15-2+b8 100\n        100 /var/lib/dpkg/status\n")
    pol = apt_query.Policy(text)
    assert (pol.known, pol.candidate, pol.versions) == (True, "5.2.15-2+b13", ["5.2.15-2+b13", "5.2.15-2+b8"])
    virtual = apt_query.Policy("awk:\n  Installed: (none)\n  Candidate: (none)\n  Version table:\n")
    assert (virtual.known, virtual.candidate, virtual.versions) == (True, None, [])
    assert not apt_query.Policy("").known


def test_an_installed_package_on_this_machine():
    deadline = time.time() + 60
    installed, version, has_files = apt_query.dpkg_state("dpkg", deadline)
    assert installed and has_files and version
    assert version in apt_query.policy("dpkg", None, deadline).versions
    assert apt_query.dpkg_state("dfp-no-such-package", deadline) == (False, None, False)
