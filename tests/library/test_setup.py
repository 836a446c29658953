"""setup: gather_subset read as Ansible reads it (compared with ansible-core's own reading; commas split), a subset Ansible does not know refused naming it, filter's patterns; run as the host runs it
(`python3 -m library.setup ARGS.json`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dflash_host.host.ansible_facts import ALIASES, MINIMAL, VALID, chosen_subsets, parse_cpuinfo

ROOT = Path(__file__).resolve().parents[2]


def setup(tmp_path: Path, **args) -> dict:
    path = tmp_path / "args.json"
    path.write_text(json.dumps(args))
    proc = subprocess.run([sys.executable, "-m", "library.setup", str(path)], capture_output=True, text=True,
                          cwd=ROOT, timeout=60)
    return json.loads(proc.stdout)


@pytest.mark.parametrize("spec", [["all"], ["!all"], ["!all", "!min"], ["!all", "!min", "network"], ["!hardware"],
                                  ["!all", "hardware", "!platform"], ["min", "!dns"], ["network", "!all"]])
def test_gather_subset_chooses_as_ansibles_own_reading(spec):
    """The same subsets as ansible-core's get_collector_names given our subsets and aliases."""
    from ansible.module_utils.facts.collector import get_collector_names

    every = VALID - {"all", "min"}
    theirs = get_collector_names(valid_subsets=frozenset(every), minimal_gather_subset=frozenset(MINIMAL),
                                 gather_subset=spec, aliases_map={k: set(v) for k, v in ALIASES.items()})
    assert chosen_subsets(spec) == theirs


def test_commas_split_and_filter_picks_names(tmp_path):
    res = setup(tmp_path, gather_subset="!all,!min,platform", filter=["ansible_sys*", "module_setup"])
    assert res["ansible_facts"] == {"ansible_system": "Linux", "module_setup": True}


def test_a_subset_ansible_does_not_know_fails_naming_it(tmp_path):
    res = setup(tmp_path, gather_subset=["bogus"])
    assert res["failed"] and res["msg"].startswith("Bad subset 'bogus' given to Ansible. gather_subset options allowed: all,")


def test_cpuinfo_counts_sockets_cores_and_threads():
    text = "".join(f"processor\t: {i}\nvendor_id\t: GenuineIntel\nmodel name\t: Xeon\nphysical id\t: {i // 4}\n"
                   f"siblings\t: 4\ncore id\t: {i % 2}\ncpu cores\t: 2\nflags\t: fpu sse\n\n" for i in range(8))
    facts = parse_cpuinfo(text, "x86_64")
    assert (facts["processor_count"], facts["processor_cores"], facts["processor_threads_per_core"],
            facts["processor_vcpus"]) == (2, 2, 2, 8)
    assert facts["processor"][:3] == ["0", "GenuineIntel", "Xeon"] and facts["flags"] == ["fpu", "sse"]
