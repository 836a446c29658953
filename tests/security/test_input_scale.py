"""Input limits that hold at scale: a flat YAML file of millions of values is refused while it is parsed (in
about a second, in little memory), an INI inventory has the same values bound, one 2 MB INI line is read in
linear time, and 100,000 hosts from a range load in seconds. The INI word splitter is shlex's, checked
against shlex itself on random lines."""

from __future__ import annotations

import random
import resource
import shlex
import time

import pytest

from engine.errors import UserError
from engine.inventory.ini import split_line
from engine.inventory.manager import Inventory
from engine.parsing.yamlfile import load_yaml


def test_a_flat_yaml_of_millions_of_values_is_refused_while_parsing(tmp_path):
    path = tmp_path / "flat.yaml"
    path.write_text("[" + ",".join("1" for _ in range(3_900_000)) + "]")  # 7.4 MiB, under the size bound
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.process_time()
    with pytest.raises(UserError, match="more than 1,000,000 values"):
        load_yaml(path)
    assert time.process_time() - started < 5
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200 * 1024  # KiB: nothing was composed


def test_an_ini_inventory_has_the_same_values_bound(tmp_path):
    path = tmp_path / "hosts.ini"
    path.write_text("[all]\n" + "\n".join(f"h{i} a=1 b=2 c=3 d=4 e=5 f=6 g=7 h=8 i=9" for i in range(110_000)) + "\n")
    with pytest.raises(UserError, match="more than 1,000,000 values"):
        Inventory(str(path))


def test_one_long_ini_line_is_read_in_linear_time(tmp_path):
    path = tmp_path / "hosts.ini"
    path.write_text("[all]\nh1 blob=" + "x" * 2_000_000 + "\n")
    started = time.process_time()
    inv = Inventory(str(path))
    assert time.process_time() - started < 10
    assert len(inv.hosts["h1"].vars["blob"]) == 2_000_000


def test_a_hundred_thousand_hosts_load_in_seconds(tmp_path):
    path = tmp_path / "hosts.ini"
    path.write_text("[gpu]\nnode[1:100000]\n[gpu:vars]\nansible_user=deploy\n")
    started = time.process_time()
    inv = Inventory(str(path))
    assert len(inv.hosts) == 100_000 and inv.hosts_in("gpu")[-1] == "node100000"
    assert time.process_time() - started < 20  # was quadratic: 10,000 took 3.6 s


def test_the_word_splitter_reads_lines_as_shlex_does():
    rng = random.Random(7)
    alphabet = "ab =\'\"\\# \t$`"
    for _ in range(20_000):
        line = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 16)))
        try:
            want = shlex.split(line, comments=True)
        except ValueError as exc:
            want = ["error", str(exc)]
        try:
            got = split_line(line)
        except ValueError as exc:
            got = ["error", str(exc)]
        assert got == want, repr(line)
