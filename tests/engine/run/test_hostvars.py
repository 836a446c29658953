"""hostvars across hosts and ansible_play_hosts: several real hosts (`ansible_connection: local`, one worker
each) read what the others registered, set and gathered; host data stays data; secrets stay masked."""

from __future__ import annotations

import io
import json

import yaml

from engine.api import run_playbook
from engine.report.console import Console

SECRET = "tok-7e1b9c-secret"  # an inventory value of a host no play targets
HIDDEN = "hid-4c2d8a-value"  # what a no_log task registers


def write(tmp_path, plays, host_vars=None):
    """The playbook and an inventory of local hosts a, b, c (group cluster) and w (in no play)."""
    local = {"ansible_connection": "local"}
    hosts = {h: dict(local, **(host_vars or {}).get(h, {})) for h in ("a", "b", "c", "w")}
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": hosts, "children": {"cluster": {"hosts": {h: None for h in "abc"}}}}}))
    pb = tmp_path / "pb.yaml"
    pb.write_text(yaml.safe_dump([dict({"hosts": "cluster", "gather_facts": False}, **p) for p in plays], sort_keys=False))
    return pb, inv


def messages(res, task):
    return {r.host: r.msg for r in res.find(task)}


ALL_PROBES = "{% for h in groups.cluster %}{{ hostvars[h].probe.stdout | trim }},{% endfor %}"


def test_the_next_task_reads_what_the_other_hosts_registered(tmp_path):
    """`again` re-registers `probe` on every host while reading the others' `probe`; on a, its second item
    renders after b and c have finished (a's first item sleeps): a still reads the values of the task before
    (a loop result, with no `stdout`, had it read what b and c wrote meanwhile)."""
    first = "{{ ('sleep 1' if inventory_hostname == 'a' else 'true') if item == 1 else 'echo ' ~ seen }}"
    pb, inv = write(tmp_path, [{"tasks": [
        {"name": "probe", "command": {"argv": ["echo", "fp-{{ inventory_hostname }}"]}, "register": "probe"},
        {"name": "again", "command": {"argv": ["sh", "-c", first]}, "loop": [1, 2], "register": "probe",
         "vars": {"seen": ALL_PROBES}},
        {"name": "head", "debug": {"msg": "{{ hostvars[groups.cluster[0]].probe.results[1].stdout | trim }}"}},
    ]}])
    res = run_playbook(pb, inv)
    assert res.exit_code == 0, res.tasks
    seen = {h: r["probe"]["results"][1]["stdout"].strip() for h, r in res.registered.items() if h in "abc"}
    assert seen == dict.fromkeys("abc", "fp-a,fp-b,fp-c,")
    assert messages(res, "head") == dict.fromkeys("abc", "fp-a,fp-b,fp-c,")


def test_host_data_read_through_hostvars_is_never_rendered(tmp_path):
    payload = tmp_path / "payload.txt"
    payload.write_text("{{ 7*6 }}")
    pb, inv = write(tmp_path, [{"tasks": [
        {"name": "read", "command": {"argv": ["cat", str(payload)]}, "register": "out", "when": "inventory_hostname == 'b'"},
        {"name": "keep", "set_fact": {"kept": "{{ out.stdout | trim }}"}, "when": "inventory_hostname == 'b'"},
        {"name": "registered", "debug": {"msg": "{{ hostvars.b.out.stdout | trim }}"}},
        {"name": "set", "debug": {"msg": "{{ hostvars['b'].kept }}"}},
        {"name": "typed", "assert": {"that": ["hostvars.b.kept == '{' ~ '{ 7*6 }' ~ '}'", "hostvars.b.kept != 42"]}},
    ]}])
    res = run_playbook(pb, inv)
    assert res.exit_code == 0, res.tasks
    assert messages(res, "registered") == dict.fromkeys("abc", "{{ 7*6 }}")
    assert messages(res, "set") == dict.fromkeys("abc", "{{ 7*6 }}")


def test_inventory_values_render_in_their_own_hosts_context(tmp_path):
    pb, inv = write(tmp_path, [{"hosts": "a", "tasks": [
        {"name": "other", "debug": {"msg": "{{ hostvars.b.greeting }} / {{ hostvars['w'].greeting }}"}},
        {"name": "missing", "debug": {"msg": "{{ hostvars.nohost.greeting }}"}},
    ]}], host_vars={h: {"port": n, "greeting": "{{ inventory_hostname }}:{{ port }}:{{ group_names | join(',') }}"}
                    for n, h in enumerate("abcw")})
    res = run_playbook(pb, inv)
    assert messages(res, "other") == {"a": "b:1:cluster / w:3:ungrouped"}
    assert res.exit_code == 2 and "'nohost' is undefined" in messages(res, "missing")["a"]


def test_facts_of_another_host(tmp_path):
    """b gathers facts in the first play; a, which never gathers, reads them through hostvars[b].facts."""
    pb, inv = write(tmp_path, [
        {"hosts": "b", "gather_facts": True, "tasks": [{"name": "own", "debug": {"msg": "{{ facts | to_json }}"}}]},
        {"hosts": "a", "tasks": [
            {"name": "b's", "debug": {"msg": "{{ hostvars.b.facts | to_json }}"}},
            {"name": "a's", "debug": {"msg": "{{ hostvars.a.facts | to_json }} {{ facts | to_json }}"}},
        ]},
    ])
    res = run_playbook(pb, inv)
    assert res.exit_code == 0, res.tasks
    own = json.loads(messages(res, "own")["b"])
    assert own.get("python") and json.loads(messages(res, "b's")["a"]) == own
    assert messages(res, "a's") == {"a": "{} {}"}


def test_secrets_read_through_hostvars_stay_masked(tmp_path):
    """w's secret-named inventory value (w is in no play, so the run never collected it up front), a no_log
    result of b, and a set_fact computed from w's secret: none shows in the console or the reports."""
    pb, inv = write(tmp_path, [{"tasks": [
        {"name": "hide", "command": {"argv": ["echo", HIDDEN]}, "register": "hid", "no_log": True},
        {"name": "token", "debug": {"msg": "w has {{ hostvars.w.w_api_token }}"}, "when": "inventory_hostname == 'a'"},
        {"name": "hidden", "debug": {"msg": "b has {{ hostvars.b.hid.stdout }}"}, "when": "inventory_hostname == 'a'"},
        {"name": "derive", "set_fact": {"shout": "{{ hostvars.w.w_api_token | upper }}"}},
        {"name": "derived", "debug": {"msg": "{{ shout }}"}},
    ]}], host_vars={"w": {"w_api_token": SECRET}})
    out = io.StringIO()
    report = tmp_path / "r.json"
    res = run_playbook(pb, inv, report=str(report), console=Console(stream=out, verbose=1))
    assert res.exit_code == 0, res.tasks
    assert messages(res, "token")["a"] == "w has ********"
    assert messages(res, "hidden")["a"] == "b has ********"
    assert set(messages(res, "derived").values()) == {"********"}
    shown = out.getvalue() + report.read_text() + json.dumps(res.tasks) + json.dumps(res.registered)
    for value in (SECRET, SECRET.upper(), HIDDEN):
        assert value not in shown
    assert "w has ********" in out.getvalue()


def test_ansible_play_hosts_leave_out_failed_hosts(tmp_path):
    pb, inv = write(tmp_path, [{"tasks": [
        {"name": "b fails", "fail": {"msg": "no"}, "when": "inventory_hostname == 'b'"},
        {"name": "hosts", "debug": {"msg": "{{ ansible_play_hosts | join(',') }} of {{ ansible_play_hosts_all | join(',') }}"}},
    ]}])
    res = run_playbook(pb, inv)
    assert res.exit_code == 2
    assert messages(res, "hosts") == {"a": "a,c of a,b,c", "c": "a,c of a,b,c"}
    limited = run_playbook(pb, inv, limit="a,b")
    assert messages(limited, "hosts") == {"a": "a of a,b"}


def test_a_template_reaches_only_variables_through_hostvars_never_the_views_layers(tmp_path):
    """`raw()`, `maps` and the views' bookkeeping would bypass rendering and masking: a template gets
    nothing from them, and `hostvars.w.raw` is w's variable named raw, like `hostvars.w['raw']`."""
    pb, inv = write(tmp_path, [{"tasks": [
        {"name": "hide", "command": {"argv": ["echo", HIDDEN]}, "register": "hid", "no_log": True},
        {"name": "layers", "debug": {"msg": "{{ hostvars.w.raw().maps[1]['w_api_token'] }}"},
         "when": "inventory_hostname == 'a'", "ignore_errors": True},
        {"name": "results", "debug": {"msg": "{{ hostvars.b.raw() }}"}, "when": "inventory_hostname == 'a'",
         "ignore_errors": True},
        {"name": "owner", "debug": {"msg": "{{ hostvars.owner }}"}, "when": "inventory_hostname == 'a'",
         "ignore_errors": True},
        {"name": "named raw", "debug": {"msg": "{{ hostvars.w.raw }} {{ hostvars.w.keys | default('none') }}"},
         "when": "inventory_hostname == 'a'"},
    ]}], host_vars={"w": {"w_api_token": SECRET, "raw": "w-raw-value"}})
    out = io.StringIO()
    res = run_playbook(pb, inv, console=Console(stream=out, verbose=1))
    for task in ("layers", "results", "owner"):
        assert res.find(task, "a")[-1].status == "failed", res.find(task, "a")[-1].msg
    assert messages(res, "named raw")["a"].startswith("w-raw-value ")
    shown = out.getvalue() + json.dumps(res.tasks)
    assert SECRET not in shown and HIDDEN not in shown
