"""README's first lines, as a newcomer runs them. CI runs them for real (.ci/run calls .ci/newcomer: a fresh
clone, venv and HOME, the main job, status, teardown); these tests hold what that step reads from README, and
are the one test README's test line runs there (`invoke test --fast -k ...`), so that line runs without
recursing into the whole suite."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def first_block() -> list:
    m = re.search(r"^```bash\n(.*?)^```", README, re.S | re.M)
    assert m, "README.md starts with no ```bash block"
    return [line for line in m.group(1).splitlines() if line.strip()]


def without_comment(line: str) -> str:
    return re.sub(r"\s+#.*$", "", line)


def test_readme_first_block_is_what_the_newcomer_step_runs():
    """The venv line, the main job, the tests; .ci/newcomer runs the first two as printed, then status and
    teardown, and the third with its `invoke test` narrowed to this test."""
    setup, main_job, tests = first_block()
    assert without_comment(main_job).endswith("&& invoke provision --host local"), main_job
    assert without_comment(tests).endswith("&& invoke test"), tests
    for line in (setup, main_job, tests):
        assert subprocess.run(["bash", "-n", "-c", line]).returncode == 0, f"not a shell command line: {line}"
    out = subprocess.run(["bash", str(ROOT / ".ci" / "newcomer"), "--dry-run"], capture_output=True, text=True,
                         check=True).stdout.splitlines()
    narrowed = f"{without_comment(tests)} --fast -k test_readme_first_block_is_what_the_newcomer_step_runs"
    assert out == [setup, main_job, "invoke status --host local", "invoke teardown --host local", setup, narrowed]
    assert "bash .ci/newcomer" in (ROOT / ".ci" / "run").read_text(), ".ci/run must run the newcomer step"


def test_readme_names_the_packages_ci_installs_for_the_tests():
    """README's install line for the tests' system packages and .ci/run's list are the same packages."""
    m = re.search(r"`apt-get install -y ([a-z0-9 .+-]+)`", README)
    assert m, "README.md names no `apt-get install -y ...` line for the tests"
    ci = re.search(r'^TEST_PACKAGES="([^"]+)"', (ROOT / ".ci" / "run").read_text(), re.M)
    assert ci, ".ci/run has no TEST_PACKAGES line"
    assert sorted(m.group(1).split()) == sorted(ci.group(1).split())
