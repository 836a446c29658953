"""The JUnit and JSON reports a job keeps, written by the real CLI."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET  # noqa: N817 - the usual name

from dfp_cli.rebuild_report import junit_suite
from tests.cli.helpers import invoke, write_play


def test_junit_with_control_characters_in_a_message_is_valid_xml(tmp_path):
    bad = "bad \x01 byte and \x1b[31mred\x1b[0m, tab\tkept"
    pb, inv, _ = write_play(tmp_path, [{"name": "breaks \x07", "fail": {"msg": bad}}])
    junit = tmp_path / "j.xml"
    code, out = invoke("play", str(pb), "-i", str(inv), "--junit", str(junit))
    assert code == 2, out
    root = ET.parse(junit).getroot()  # raised "not well-formed (invalid token)" before
    failure = root.find(".//failure")
    assert failure is not None and failure.text == "bad  byte and [31mred[0m, tab\tkept"
    assert failure.get("message") == failure.text
    assert {c.get("name") for c in root.iter("testcase")} == {"Would change the host", "breaks "}
    assert (root.get("tests"), root.get("failures")) == ("2", "1")


def test_a_report_section_suite_is_valid_xml_too():
    """The nightly rebuild's suite (a report section) goes through the same builder."""
    section = {"mode": "latest", "old_env": "a\x02", "new_env": None, "old_versions": {}, "new_versions": {},
               "switched": False, "rolled_back": True, "downtime_s": 1.5,
               "phases": [{"name": "build", "status": "failed", "duration_s": 2.0, "tasks": 3, "msg": "pip \x1b[1mfailed"},
                          {"name": "switch", "status": "skipped", "duration_s": 0.0, "tasks": 0, "msg": ""}]}
    suite = junit_suite("gpu1", section)
    parsed = ET.fromstring(ET.tostring(suite, encoding="unicode"))
    assert (parsed.get("tests"), parsed.get("failures"), parsed.get("skipped")) == ("2", "1", "1")
    assert parsed.find(".//failure").text == "pip [1mfailed"
    props = {p.get("name"): p.get("value") for p in parsed.iter("property")}
    assert props["old_env"] == '"a\\u0002"' and props["rolled_back"] == "true"


def test_json_report_carries_each_task_data_as_numbers_with_secrets_masked(tmp_path):
    token = "hf_DoNotLeak123456789"
    pb, inv, _ = write_play(tmp_path, [
        {"name": "figures", "command": {"argv": ["python3", "-c", "import sys; print(0.625); print(sys.argv[1])", "{{ hf_token }}"]},
         "register": "out"},
        {"name": "long", "command": {"argv": ["python3", "-c", "print('x' * 20000)"]}},
        {"name": "rate", "set_fact": {"acceptance_rate": "{{ out.stdout.split()[0] | float }}"}},
    ])
    report = tmp_path / "r.json"
    code, out = invoke("play", str(pb), "-i", str(inv), "-e", f"hf_token={token}", "--report", str(report))
    assert code == 0, out
    text = report.read_text()
    assert token not in text
    tasks = {t["task"]: t for t in json.loads(text)["tasks"]}
    figures = tasks["figures"]["data"]
    assert figures["rc"] == 0 and figures["stdout"].split() == ["0.625", "********"], figures
    assert figures["argv"][-1] == "********"
    assert tasks["rate"]["data"]["ansible_facts"]["acceptance_rate"] == 0.625  # a number, not text
    long = tasks["long"]["data"]["stdout"]
    # 20000: the command's stdout loses its line end at the end (strip_empty_ends, as Ansible's)
    assert long.startswith("x" * 4096) and "[cut: 20000 characters" in long and len(long) < 4200
    assert "msg" not in figures and "changed" not in figures  # already fields of the task entry
