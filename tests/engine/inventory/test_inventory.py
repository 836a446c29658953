"""Inventory: Ansible's YAML format, group_vars/host_vars, precedence, patterns."""

from __future__ import annotations

import pytest
import yaml

from engine.errors import UserError
from engine.inventory.manager import Inventory


def _write(tmp_path, data, files=None):
    inv = tmp_path / "inventory.yaml"
    inv.write_text(yaml.safe_dump(data))
    for rel, content in (files or {}).items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(yaml.safe_dump(content))
    return Inventory(inv)


def test_host_vars_follow_ansible_precedence(tmp_path):
    inv = _write(
        tmp_path,
        {"all": {"vars": {"v": "all", "only_all": 1},
                 "children": {"gpu": {"vars": {"v": "gpu"},
                                      "children": {"h200": {"hosts": {"g1": {"v": "host-inline"}, "g2": None},
                                                            "vars": {"v": "h200", "deep": True}}}}}}},
        {"group_vars/all.yaml": {"v": "gv-all", "gv_all": 1},
         "group_vars/gpu.yml": {"v": "gv-gpu"},
         "host_vars/g1.yaml": {"v": "hv-g1"}},
    )
    assert inv.host_vars("g1")["v"] == "hv-g1"
    # Ansible: group_vars/ files beat inline group vars (a child beats its parent within each kind),
    # so for g2 the file of its parent group 'gpu' wins over the inline vars of 'h200'.
    assert inv.host_vars("g2")["v"] == "gv-gpu"
    assert inv.host_vars("g2")["deep"] is True
    assert inv.host_vars("g2")["only_all"] == 1 and inv.host_vars("g2")["gv_all"] == 1
    assert inv.hosts["g1"].groups == ["all", "gpu", "h200"]


def test_child_group_overrides_parent_and_host_overrides_group(tmp_path):
    inv = _write(tmp_path, {"all": {"vars": {"a": 0, "b": 0, "c": 0},
                                    "children": {"p": {"vars": {"a": 1, "b": 1},
                                                       "children": {"c": {"vars": {"a": 2}, "hosts": {"x": {"b": 3}}}}}}}})
    v = inv.host_vars("x")
    assert (v["a"], v["b"], v["c"]) == (2, 3, 0)


def test_inventory_list_has_ansible_shape(tmp_path):
    inv = _write(tmp_path, {"all": {"hosts": {"lone": None}, "children": {"g": {"hosts": {"a": {"ansible_port": 2222}}}}}})
    out = inv.as_list()
    assert out["_meta"]["hostvars"]["a"]["ansible_port"] == 2222
    assert out["g"]["hosts"] == ["a"]
    assert "g" in out["all"]["children"] and "ungrouped" in out["all"]["children"]
    assert out["ungrouped"]["hosts"] == ["lone"]


@pytest.mark.parametrize(
    "pattern,expected",
    [("all", ["a1", "a2", "b1"]), ("ga", ["a1", "a2"]), ("a*", ["a1", "a2"]), ("ga:gb", ["a1", "a2", "b1"]),
     ("all:!a2", ["a1", "b1"]), ("all:&gb", ["b1"]), ("a1,b1", ["a1", "b1"])],
)
def test_patterns_select_hosts(tmp_path, pattern, expected):
    inv = _write(tmp_path, {"all": {"children": {"ga": {"hosts": {"a1": None, "a2": None}}, "gb": {"hosts": {"b1": None}}}}})
    assert inv.select(pattern) == expected


def test_unknown_host_in_pattern_names_known_hosts(tmp_path):
    inv = _write(tmp_path, {"all": {"hosts": {"gpu1": None}}})
    with pytest.raises(UserError, match=r"'gpu9' matches no host or group.*hosts: gpu1"):
        inv.select("gpu9", where="--host")


def test_unknown_group_key_is_a_clear_error(tmp_path):
    with pytest.raises(UserError, match=r"group 'g' has unknown key\(s\) host; a group may only have hosts, vars and children"):
        _write(tmp_path, {"all": {"children": {"g": {"host": {"x": None}}}}})


def test_malformed_inventory_names_line_and_column(tmp_path):
    p = tmp_path / "inventory.yaml"
    p.write_text("all:\n  hosts:\n    a: {ansible_port: 22\n")
    with pytest.raises(UserError, match=r"inventory.yaml:\d+:\d+: malformed YAML"):
        Inventory(p)
