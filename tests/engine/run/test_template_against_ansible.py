"""template (engine/run/actions/files.py) against real ansible-playbook: the same template tasks with Ansible's
Jinja options (trim_blocks, lstrip_blocks, newline_sequence, the block/variable/comment strings, output_encoding,
follow, mode preserve), each in its own copy of one tree; compared: failed, changed, the files after (bytes, mode)
and the fields Ansible's template returns (checksum, md5sum, state, dest, size, mode, src there or not)."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "library"))
from _ansible_side import registered_by_both  # noqa: E402

TEMPLATES = {
    "blocks.j2": "{% for i in [1, 2] %}\n    {% if i %}\nline {{ i }}\n    {% endif %}\n{% endfor %}\nend\n",
    "custom.j2": "[% for i in [1, 2] %]<< i >>,[% endfor %] {{ untouched }} #< gone >#\n",
    "text.j2": "caf\u00e9 {{ 40 + 2 }}\nsecond\n",
}
FIELDS = ("checksum", "md5sum", "state", "dest", "size", "mode")
CASES = [
    ("defaults", {"src": "blocks.j2", "dest": "@/out"}, False),
    ("no-trim", {"src": "blocks.j2", "dest": "@/out", "trim_blocks": False}, False),
    ("lstrip", {"src": "blocks.j2", "dest": "@/out", "lstrip_blocks": True}, False),
    ("crlf", {"src": "text.j2", "dest": "@/out", "newline_sequence": "\r\n"}, False),
    ("crlf-escaped", {"src": "text.j2", "dest": "@/out", "newline_sequence": "\\r\\n"}, False),
    ("custom-strings", {"src": "custom.j2", "dest": "@/out", "block_start_string": "[%", "block_end_string": "%]",
                        "variable_start_string": "<<", "variable_end_string": ">>", "comment_start_string": "#<",
                        "comment_end_string": ">#"}, False),
    ("latin-1", {"src": "text.j2", "dest": "@/out", "output_encoding": "latin-1"}, False),
    ("into-folder", {"src": "text.j2", "dest": "@/dir"}, False),
    ("same-content", {"src": "text.j2", "dest": "@/same"}, False),
    ("mode-preserve", {"src": "text.j2", "dest": "@/out", "mode": "preserve"}, False),
    ("follow", {"src": "text.j2", "dest": "@/link", "follow": True}, False),
    ("check", {"src": "text.j2", "dest": "@/out"}, True),
    ("bad-newline", {"src": "text.j2", "dest": "@/out", "newline_sequence": "x"}, False),
]


def _build(folder: Path) -> None:
    (folder / "dir").mkdir(parents=True)
    (folder / "same").write_text("caf\u00e9 42\nsecond\n")
    (folder / "target").write_text("old\n")
    (folder / "link").symlink_to("target")


def _tasks(base: Path) -> list[tuple[str, dict]]:
    return [(cid, {"template": {k: (str(base / cid) + v[1:] if isinstance(v, str) and v.startswith("@") else v)
                                for k, v in args.items()}, "check_mode": check, "vars": {"untouched": "u"}})
            for cid, args, check in CASES]


def _tree(folder: Path) -> dict:
    return {str(p.relative_to(folder)): (oct(stat.S_IMODE(p.lstat().st_mode)), p.read_bytes() if p.is_file() else None)
            for p in sorted(folder.rglob("*")) if ".dfp-" not in str(p)}


@pytest.fixture(scope="module")
def both(tmp_path_factory) -> dict:
    work = tmp_path_factory.mktemp("template")
    for side in ("ansible", "ourside"):
        (work / side / "templates").mkdir(parents=True)
        for name, text in TEMPLATES.items():
            (work / side / "templates" / name).write_text(text)
            os.chmod(work / side / "templates" / name, 0o640)
        for cid, *_rest in CASES:
            _build(work / side / "t" / cid)
    return registered_by_both(work, _tasks)


@pytest.mark.parametrize("cid", [c[0] for c in CASES])
def test_template_renders_and_answers_as_ansibles(both, cid):
    theirs, ours, t_dir, o_dir = both[cid]
    assert bool(ours.get("failed")) == bool(theirs.get("failed")), (theirs, ours)
    assert _tree(o_dir) == _tree(t_dir)
    if theirs.get("failed"):
        return
    assert ours.get("changed") == theirs.get("changed"), (theirs, ours)
    t_fields = {k: str(theirs[k]).replace(str(t_dir), "<dir>") for k in FIELDS if k in theirs}
    o_fields = {k: str(ours[k]).replace(str(o_dir), "<dir>") for k in FIELDS if k in ours}
    assert {k: o_fields.get(k) for k in t_fields} == t_fields, (theirs, ours)
    assert ("src" in ours) == ("src" in theirs)
