"""The JUnit XML report a job keeps (`--junit`): one testsuite per host, one testcase per task, so CI systems show
failed steps directly. Its own module: ElementTree is imported only by a run that writes one."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET  # noqa: N817 - the usual name
from collections.abc import Sequence
from typing import Any

from engine.cache import write_atomically
from engine.report.console import by_host, host_sections
from engine.run.results import TaskResult

# Built with ElementTree (escaping done by the library); characters XML 1.0 cannot hold at all (control
# characters other than tab, newline and carriage return, lone surrogates, U+FFFE/U+FFFF) are dropped, so a
# module message carrying a terminal escape or a stray \x01 still gives a file every CI parser reads.
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def xml_text(value: Any) -> str:
    return _NOT_XML.sub("", str(value))


def junit_suite_element(name: str, tests: int, failures: int, skipped: int, seconds: float) -> ET.Element:
    return ET.Element("testsuite", {"name": xml_text(name), "tests": str(tests), "failures": str(failures),
                                    "skipped": str(skipped), "time": f"{seconds:.3f}"})


def junit_case(classname: str, label: str, seconds: float, failed_msg: str | None, skipped_msg: str | None,
               out: str | None) -> ET.Element:
    case = ET.Element("testcase", {"classname": xml_text(classname), "name": xml_text(label), "time": f"{seconds:.3f}"})
    if failed_msg is not None:
        failure = ET.SubElement(case, "failure", {"message": xml_text(failed_msg[:500])})
        failure.text = xml_text(failed_msg)
    elif skipped_msg is not None:
        ET.SubElement(case, "skipped", {"message": xml_text(skipped_msg[:200])})
    elif out:
        ET.SubElement(case, "system-out").text = xml_text(out)
    return case


def _task_suite(host: str, items: list[TaskResult]) -> ET.Element:
    fails = sum(1 for r in items if r.status in ("failed", "unreachable") and not r.ignored)
    skips = sum(1 for r in items if r.status == "skipped")
    suite = junit_suite_element(host, len(items), fails, skips, sum(r.duration_s for r in items))
    for r in items:
        label = f"{r.role} : {r.task}" if r.role else r.task
        failed = r.msg if r.status in ("failed", "unreachable") and not r.ignored else None
        skipped = r.msg if r.status == "skipped" else None
        suite.append(junit_case(host, label, r.duration_s, failed, skipped, "changed" if r.changed else None))
    return suite


def write_junit(path: str, results: list[TaskResult], name: str, sections: Sequence[Any] = ()) -> None:
    """One testsuite per host, one testcase per task: CI systems show failed steps directly. A nightly
    report section a playbook asks for adds its own suites (the nightly rebuild: one test case per phase)."""
    suites = [_task_suite(host, items) for host, items in by_host(results).items()]
    by_name = {mod.NAME: mod for mod in sections}
    for host, found in host_sections(results, list(sections)).items():
        suites += [by_name[n].junit_suite(host, data) for n, data in found.items()]
    root = ET.Element("testsuites", {
        "name": xml_text(name),
        "tests": str(sum(int(s.get("tests", 0)) for s in suites)),
        "failures": str(sum(int(s.get("failures", 0)) for s in suites)),
    })
    root.extend(suites)
    ET.indent(root)
    write_atomically(path, ET.tostring(root, encoding="UTF-8", xml_declaration=True))
