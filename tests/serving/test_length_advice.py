"""A workload longer than the server's context: one message naming what does not fit, and advice that works
(following it, the check passes). Against the in-process stand-in whose /tokenize counts words
(standin_server.py); the built-in workload against vLLM's real tokenizer is tests/speed/test_readme_speed_e2e.py.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from dflash_host.module import Context, execute
from library import serving_bench

sys.path.insert(0, str(Path(__file__).resolve().parent))
from standin_server import StandIn  # noqa: E402


def check(url: str, **over) -> dict:
    args = {"url": url, "model": "tiny", "check_only": True, "concurrency": [1], "max_tokens": 256, **over}
    return execute(serving_bench.ARGS, serving_bench.run, args, Context(), "serving_bench")


def prompts(tmp_path: Path, *lines: dict) -> str:
    path = tmp_path / "traffic.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return str(path)


def advised(msg: str) -> int:
    """The max_tokens the message advises (--max-tokens N)."""
    found = re.search(r"--max-tokens (\d+)", msg)
    assert found, msg
    return int(found.group(1))


def test_the_advised_max_tokens_fits_every_request_not_only_the_first_refused(tmp_path):
    # 256 fits the first; the second is refused first (232 would fit it), the third is the longest (212 fits)
    path = prompts(tmp_path, {"prompt": "w " * 100}, {"prompt": "w " * 280}, {"prompt": "w " * 300})
    with StandIn(tokenize=True) as srv:
        res = check(srv.url, prompts_file=path)
        assert res["failed"], res
        msg = res["msg"]
        assert "max_model_len 512" in msg and f"{path} line 3" in msg and "300-token prompt" in msg, msg
        assert "2 of 3 requests" in msg and "max_model_len 556 or more" in msg, msg
        n = advised(msg)
        assert n == 212
        ok = check(srv.url, prompts_file=path, max_tokens=n)
        assert not ok.get("failed") and "fits the server" in ok["msg"], ok
        assert check(srv.url, prompts_file=path, max_tokens=n + 1)["failed"]
        bigger = check(srv.url, prompts_file=path, max_tokens=256)  # the other advice: a longer context
    with StandIn(tokenize=True, max_model_len=556) as srv:
        assert not check(srv.url, prompts_file=path, max_tokens=256).get("failed")
    assert bigger["failed"]


def test_a_prompt_longer_than_the_context_must_be_shortened_and_a_lines_own_max_tokens_lowered(tmp_path):
    path = prompts(tmp_path, {"prompt": "fine"}, {"prompt": "w " * 600}, {"prompt": "w " * 100, "max_tokens": 500})
    with StandIn(tokenize=True) as srv:
        res = check(srv.url, prompts_file=path, max_tokens=16)
    msg = res["msg"]
    assert res["failed"] and f"shorten {path} line 2" in msg and "whatever max_tokens" in msg, msg
    assert f"{path} line 3 asks for max_tokens 500 of its own" in msg and "lower it to 412 or less" in msg, msg
    assert "--max-tokens" not in msg  # max_tokens 16 fits every request that takes it
    assert msg.count("serving_bench:") == 1  # one paragraph


def test_the_built_in_workload_names_its_longest_request_and_a_max_tokens_that_fits_it():
    with StandIn(tokenize=True, max_model_len=100) as srv:
        res = check(srv.url, max_tokens=64)
        assert res["failed"] and "the built-in workload does not fit the server's max_model_len 100" in res["msg"]
        assert re.search(r"the longest, request \d+ \(summary\)", res["msg"]), res["msg"]
        n = advised(res["msg"])
        ok = check(srv.url, max_tokens=n)
    assert not ok.get("failed"), ok["msg"]


def test_a_file_whose_every_prompt_the_server_refuses_is_one_message_naming_the_lines(tmp_path):
    path = prompts(tmp_path, {"prompt": "w " * 700}, {"prompt": "w " * 900})
    with StandIn(tokenize=True) as srv:
        res = check(srv.url, prompts_file=path)
    assert res["failed"] and f"shorten {path} line 1, {path} line 2: their prompts are 512 tokens or longer" in res["msg"]
    assert "Traceback" not in res["msg"] and res["msg"].count("serving_bench:") == 1
