"""The speed workloads: the operator's prompts file parsed (or refused, naming the line), the built-in mixed
workload the same every time (dflash_host/speed/workload.py)."""

from __future__ import annotations

import json

import pytest

from dflash_host.speed.workload import BUILTIN_VERSION, WorkloadError, builtin_requests, cycle, describe_builtin, parse_prompts


def test_a_prompts_file_gives_completions_and_chats_with_their_lines_and_max_tokens():
    raw = b'{"prompt": "Hello"}\n\n{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 32}\n'
    got = parse_prompts(raw, "prompts.jsonl")
    assert got == [{"prompt": "Hello", "line": 1},
                   {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 32, "line": 3}]


@pytest.mark.parametrize("raw, why", [
    (b"", "has no request"),
    (b"\n  \n", "has no request"),
    (b'{"prompt": "a"}\n{"prompt": "b",}\n', "line 2: not JSON"),
    (b'["a"]\n', "line 1: a JSON list, not an object"),
    (b'{"prompt": "a", "messages": []}\n', "exactly one of"),
    (b'{"prompt": ""}\n', "not a non-empty text"),
    (b'{"messages": [{"role": "robot", "content": "x"}]}\n', "messages[0] is not"),
    (b'{"prompt": "a", "max_tokens": 0}\n', "max_tokens\" is 0"),
    (b'{"prompt": "a", "temperature": 1}\n', "unknown key(s) 'temperature'"),
    (b"\xff\xfe", "not UTF-8"),
])
def test_a_bad_prompts_file_is_refused_naming_the_file_and_line(raw, why):
    with pytest.raises(WorkloadError) as err:
        parse_prompts(raw, "ops/prompts.jsonl")
    assert why in str(err.value) and "ops/prompts.jsonl" in str(err.value)


def test_the_builtin_workload_is_deterministic_and_mixed():
    one, two = builtin_requests(256), builtin_requests(256)
    assert one == two and len(one) == 256 and json.dumps(one) == json.dumps(two)
    assert {r["kind"] for r in one} == {"chat", "code", "math", "summary", "support"}
    assert len({r["messages"][0]["content"] for r in one}) > 200  # a few hundred different prompts
    info = describe_builtin(one)
    assert info["version"] == BUILTIN_VERSION and info["sha256"] == describe_builtin(two)["sha256"]


def test_a_repetition_longer_than_the_workload_wraps_around():
    items = [{"prompt": "a"}, {"prompt": "b"}, {"prompt": "c"}]
    assert [i["prompt"] for i in cycle(items, 5, start=2)] == ["c", "a", "b", "c", "a"]
