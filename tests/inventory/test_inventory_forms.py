"""Inventory forms people write: ranges, INI, folders, several sources; and the ones refused, by name.

Every refusal is a UserError (one paragraph, exit 4) that names the file and says what is not supported
or what to fix, never 'malformed YAML' for a form that is simply not YAML.
"""

from __future__ import annotations

import pytest

from engine.errors import UserError
from engine.inventory.manager import Inventory
from engine.inventory.ranges import expand, split_port


def write(tmp_path, name: str, text: str, mode: int = 0o644):
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return path


@pytest.mark.parametrize("pattern,expected", [
    ("gpu[01:03]", ["gpu01", "gpu02", "gpu03"]),
    ("node-[a:c]", ["node-a", "node-b", "node-c"]),
    ("web[0:20:5]", ["web0", "web5", "web10", "web15", "web20"]),
    ("r[1:2]c[a:b]", ["r1ca", "r1cb", "r2ca", "r2cb"]),
    ("x[:2]", ["x0", "x1", "x2"]),
    ("[Y:b]z", []),  # letters run a-z then A-Z, so Y comes after b: refused below
])
def test_ranges_expand_as_ansible_does(pattern, expected):
    if not expected:
        with pytest.raises(UserError, match="begins after it ends"):
            expand(pattern, "inv")
        return
    assert expand(pattern, "inv") == expected


@pytest.mark.parametrize("pattern,why", [
    ("gpu[01:3]", "same width"),
    ("gpu[5:1]", "begins after it ends"),
    ("gpu[1:5:0]", "step '0'"),
    ("gpu[1-5]", "not begin:end"),
    ("gpu[1:x]", "mixes letters and numbers"),
    ("gpu[1:5", "without its closing"),
    ("gpu[0:10000000]", "more than 100,000 hosts"),
])
def test_invalid_ranges_are_refused_clearly(pattern, why):
    with pytest.raises(UserError, match=rf"inv: host range .* is not valid: .*{why}.*gpu\[01:64\]"):
        expand(pattern, "inv")


@pytest.mark.parametrize("pattern,expected", [
    ("gpu01:2222", ("gpu01", 2222)), ("gpu[01:03]:2222", ("gpu[01:03]", 2222)), ("gpu[01:03]", ("gpu[01:03]", None)),
    ("[fe80::1]:22", ("fe80::1", 22)), ("fe80::1", ("fe80::1", None)),
])
def test_host_port_split(pattern, expected):
    assert split_port(pattern) == expected


def test_yaml_range_is_many_hosts_not_one_literal_name(tmp_path):
    """The issue's report: `gpu[01:03]` came out as one host literally named so."""
    inv = Inventory(write(tmp_path, "hosts.yaml", "all:\n  hosts:\n    gpu[01:03]:\n      ansible_user: me\n"))
    assert list(inv.hosts) == ["gpu01", "gpu02", "gpu03"]
    assert inv.select("all") == ["gpu01", "gpu02", "gpu03"]


def test_ini_inventory_is_read(tmp_path):
    path = write(tmp_path, "hosts", "[gpu]\ngpu[1:2] ansible_port=2222 big=True\n\n[gpu:vars]\nvllm_port=8000\n\n"
                                   "[all:children]\ngpu\n")
    inv = Inventory(path)
    assert inv.hosts["gpu1"].vars == {"ansible_port": 2222, "big": True, "vllm_port": 8000}
    assert inv.hosts["gpu2"].groups == ["all", "gpu"]


def test_folder_and_several_sources_later_wins(tmp_path):
    write(tmp_path, "a/hosts.ini", "[gpu]\ng1 who=a\n")
    write(tmp_path, "a/group_vars/gpu/main.yml", "from_folder_file: 1\n")
    b = write(tmp_path, "b.yaml", "gpu:\n  hosts:\n    g1:\n      who: b\n")
    inv = Inventory([tmp_path / "a", b])
    assert inv.hosts["g1"].vars == {"who": "b", "from_folder_file": 1}


def test_children_loop_is_refused(tmp_path):
    path = write(tmp_path, "hosts.yaml", "all:\n  children:\n    a:\n      children:\n        b:\n          children:\n"
                                        "            a:\n")
    with pytest.raises(UserError, match=r"hosts\.yaml: groups are children of each other in a loop \(.*a -> b -> a"):
        Inventory(path)


def test_ini_loop_is_refused(tmp_path):
    path = write(tmp_path, "hosts.ini", "[a]\n[b]\n[a:children]\nb\n[b:children]\na\n")
    with pytest.raises(UserError, match="in a loop"):
        Inventory(path)


@pytest.mark.parametrize("text,needle", [
    ("[gpu:child]\nx\n", r"hosts\.ini:1: section \[gpu:child\] has an unknown type"),
    ("[all:children]\nmissing\n", r"hosts\.ini:2: group 'missing' is used .* never defined"),
    ("[ghost:vars]\nx=1\n", r"hosts\.ini:1: group 'ghost' is used .* never defined"),
    ("[gpu]\ngpu1 port\n", r"hosts\.ini:2: expected key=value after the host name, got 'port'"),
    ("[gpu]\ngpu1 note=\"unclosed\n", r"hosts\.ini:2: cannot read the host line"),
    ("[gpu]\ngpu1 bad-name=1\n", r"variable name 'bad-name' is not valid"),
    ("[gpu]\ngpu[1:0]\n", r"hosts\.ini:2: host range 'gpu\[1:0\]' is not valid"),
    ("[gpu]\ngpu1 ansible_port=99999\n", r"ansible_port must be a port number"),
    ("[bad group]\n", r"invalid section"),
])
def test_bad_ini_names_file_line_and_fix(tmp_path, text, needle):
    with pytest.raises(UserError, match=needle):
        Inventory(write(tmp_path, "hosts.ini", text))


@pytest.mark.parametrize("name,text,mode,needle", [
    ("inv.py", "#!/usr/bin/env python3\nprint('{}')\n", 0o755, "a dynamic inventory script is not supported"),
    ("aws_ec2.yml", "plugin: amazon.aws.aws_ec2\nregions: [us-east-1]\n", 0o644,
     r"an inventory plugin configuration \(plugin: amazon.aws.aws_ec2\) is not supported"),
    ("hosts.toml", "[gpu.hosts.gpu1]\n", 0o644, "a TOML inventory is not supported"),
])
def test_unsupported_forms_say_so(tmp_path, name, text, mode, needle):
    with pytest.raises(UserError, match=needle):
        Inventory(write(tmp_path, name, text, mode))


def test_group_priority_must_be_a_number(tmp_path):
    path = write(tmp_path, "hosts.yaml", "all:\n  children:\n    g:\n      vars:\n        ansible_group_priority: high\n")
    with pytest.raises(UserError, match="ansible_group_priority must be a whole number"):
        Inventory(path)


def test_missing_source_names_it(tmp_path):
    with pytest.raises(UserError, match=r"nope\.ini: inventory not found"):
        Inventory([write(tmp_path, "a.yaml", "all:\n"), tmp_path / "nope.ini"])


def test_yaml_without_suffix_is_read_as_yaml(tmp_path):
    inv = Inventory(write(tmp_path, "hosts", "# fleet\nall:\n  hosts:\n    g1:\n"))
    assert list(inv.hosts) == ["g1"]


def test_a_range_product_too_large_is_refused_before_it_is_built():
    import time

    from engine.inventory.ranges import expand

    started = time.monotonic()
    with pytest.raises(UserError, match="more than 100,000 hosts"):
        expand("h[0:99999][0:99999]", "inv.ini")
    assert time.monotonic() - started < 5  # 10^10 names were never built


def test_letter_bounds_are_single_letters():
    from engine.inventory.ranges import expand

    with pytest.raises(UserError, match=r"\[ab:cd\]"):
        expand("n[ab:cd]", "inv.ini")


def test_an_unsafe_value_is_kept_as_written(tmp_path):
    """`!unsafe` in an inventory (as Ansible reads it): the text, never templated."""
    inv = Inventory(write(tmp_path, "hosts.yaml", "all:\n  hosts:\n    h1:\n      cmd: !unsafe '{{ x }}'\n", 0o644))
    value = inv.hosts["h1"].vars["cmd"]
    assert value == "{{ x }}" and type(value).__name__ == "Unsafe"
