"""Load YAML files with errors that point at file:line:column, within fixed bounds.

Inventories, playbooks, roles and -e files are input a person (or a copied snippet) controls, so a
file cannot make the control node run out of memory or stack: it is refused, with one paragraph
naming the file and the limit, when it is too big (MAX_YAML_BYTES), when its aliases expand too far
(MAX_YAML_NODES, each alias counted every time it is reached: the "billion laughs"), or when it nests
too deep (MAX_YAML_DEPTH: the engine walks values recursively). A playbook's whole load (the playbooks it
imports, its roles' files, the task files they import) is bounded too, all files together (LoadBudget), so
many files each under the bounds cannot add up to gigabytes. Variable names are checked here too
(`check_variable_names`) because every variable the engine knows comes from one of these files.
"""

from __future__ import annotations

import os
from itertools import chain
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, SequenceNode

from engine.errors import UserError
from engine.parsing import vault

# The C loader is several times faster; fall back where libyaml is missing.
_BaseLoader: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class Unsafe(str):
    """Text that is data wherever it stands, never a template: a value the YAML tags `!unsafe` (Ansible's unsafe
    text), what a person typed (the -K password). A variable holding it reads back exactly as written, `{{`, `{%`,
    quotes and backslashes included (engine/template/markers.py is_template says no to it)."""

    __slots__ = ()


class _Loader(_BaseLoader):
    """The safe loader plus Ansible's `!vault` tag; `dfp_path` names the file in errors."""

    dfp_path: Path | None = None


def _construct_vault(loader: Any, node: Any) -> str:
    """`!vault |` holds one vault envelope; its plaintext is the value (and a secret, see engine/parsing/vault.py)."""
    where = f"{loader.dfp_path}:{node.start_mark.line + 1}"
    if not isinstance(node, yaml.ScalarNode):
        raise UserError(f"{where}: a !vault value must be the text ansible-vault encrypt_string prints, not a list or mapping.")
    return vault.decrypt(loader.construct_scalar(node), f"{where} (!vault value)")


def _construct_unsafe(loader: Any, node: Any) -> Any:
    """`!unsafe`: Ansible's text that is never templated (`{{` in it stays as written), on a scalar or on every
    string inside a list or mapping."""
    if isinstance(node, yaml.ScalarNode):
        return Unsafe(loader.construct_scalar(node))
    if isinstance(node, SequenceNode):
        return [_unsafe_leaves(v) for v in loader.construct_sequence(node, deep=True)]
    return {_unsafe_leaves(k): _unsafe_leaves(v) for k, v in loader.construct_mapping(node, deep=True).items()}


def _unsafe_leaves(value: Any) -> Any:
    if isinstance(value, str):
        return Unsafe(value)
    if isinstance(value, list):
        return [_unsafe_leaves(v) for v in value]
    if isinstance(value, dict):
        return {_unsafe_leaves(k): _unsafe_leaves(v) for k, v in value.items()}
    return value


def _refuse_tag(loader: Any, suffix: str, node: Any) -> None:
    """Ansible's other tags and Python tags are not read; say so instead of 'malformed YAML'."""
    where = f"{loader.dfp_path}:{node.start_mark.line + 1}:{node.start_mark.column + 1}"
    raise UserError(f"{where}: the YAML tag {node.tag} is not supported (only !vault and !unsafe are, besides plain YAML); "
                    "remove the tag and write the plain value.")


_Loader.add_constructor("!vault", _construct_vault)
_Loader.add_constructor("!unsafe", _construct_unsafe)
_Loader.add_multi_constructor("!", _refuse_tag)
_Loader.add_multi_constructor("tag:yaml.org,2002:python/", _refuse_tag)

MAX_YAML_BYTES = 8 * 1024 * 1024  # our largest real file is a few KiB; a bigger one is a mistake or an attack
MAX_YAML_NODES = 1_000_000  # values after expanding every alias (and merge key) each time it is used
MAX_YAML_DEPTH = 100  # nested lists/mappings; real files nest fewer than 10 levels
# libyaml composes nodes recursively in C and crashes (SIGSEGV) somewhere past 20,000 levels; below this
# bound it is safe, above it the nesting is measured on the parser's events (which do not recurse) first.
_C_COMPOSER_SAFE_DEPTH = 2000

# One playbook's whole load (engine/playbook/plays.py): the playbook, the playbooks it imports, its roles' task, handler,
# defaults and vars files and the task files they import, each counted every time it is brought in (each import
# builds its tasks anew). Twelve task files of 4 MiB each, every one under the bounds above, used to load to
# 1.6 GB in 48 s; our largest playbook (rebuild.yaml) brings in 38 KB, 831 values and 67 task entries in all.
MAX_LOAD_BYTES = 16 * 1024 * 1024
MAX_LOAD_VALUES = 2_000_000
MAX_LOAD_TASKS = 20_000  # about 3 KB of memory each once checked: 60 MB at the bound


class LoadBudget:
    """What one playbook's load has brought in so far, all its files together; `charge` refuses the file that
    goes past a bound, before it is parsed (bytes) or built (values), or the task that does (tasks)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.used = {"bytes": 0, "values": 0, "tasks": 0}

    def charge(self, path: str | Path, what: str, *, nbytes: int = 0, values: int = 0, tasks: int = 0) -> None:
        for name, amount, limit, shown in (("bytes", nbytes, MAX_LOAD_BYTES, f"{MAX_LOAD_BYTES // 2**20} MiB of YAML"),
                                           ("values", values, MAX_LOAD_VALUES, f"{MAX_LOAD_VALUES:,} values"),
                                           ("tasks", tasks, MAX_LOAD_TASKS, f"{MAX_LOAD_TASKS:,} tasks")):
            self.used[name] += amount
            if amount and self.used[name] > limit:
                raise UserError(
                    f"{path}: with this {what}, the playbook {self.root} brings in more than {shown} in all "
                    f"(MAX_LOAD_{name.upper()} in engine/parsing/yamlfile.py: the playbooks it imports, its roles' files and "
                    "the task files they import, each counted every time it is imported), so the load stops here "
                    "before it exhausts memory; real playbooks bring in well under a hundredth of that. Check that "
                    "the imports name the files you meant and that no file is imported more often than it must be, "
                    "or split the work into several playbooks."
                )


_cache: dict[tuple[str, float], tuple[Any, int, int]] = {}  # (path, mtime) -> (data, bytes, values)


def forget_loaded() -> None:
    """Drop the parsed files: with vault.forget_revealed, a process running unrelated runs in turn (the test suite)
    reads each file again, as a new CLI process does, so its vault values are secrets again."""
    _cache.clear()


def load_yaml(path: str | Path, what: str = "file", budget: LoadBudget | None = None) -> Any:
    """Parse a YAML file; a syntax error or an unbounded file becomes a UserError naming the file. With a
    `budget` (a playbook's load), the file is charged to it each time it is loaded, also from the cache."""
    path = Path(path)
    try:
        key = (str(path.resolve()), path.stat().st_mtime)
    except FileNotFoundError:
        raise UserError(f"{path}: {what} not found; check the path") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read {what}: {exc.strerror}") from None
    if key in _cache:
        data, size, values = _cache[key]
        if budget is not None:
            budget.charge(path, what, nbytes=size, values=values)
        return data
    raw = _read_raw(path, what)
    if budget is not None:
        budget.charge(path, what, nbytes=len(raw))
    text = _decoded(raw, path, what)
    encrypted = vault.is_encrypted(text)
    if encrypted:
        text = vault.decrypt(text, f"{path} (vault-encrypted {what})")
    counted: list[int] = []
    data = parse_text(text, path, what, budget, counted)
    if encrypted:  # a whole file encrypted by ansible-vault: every value in it is a secret
        for leaf in leaf_texts(data):
            vault.remember_secret(leaf)
    _cache[key] = (data, len(raw), sum(counted))
    remember_written(data)
    return data


def read_text(path: str | Path, what: str = "file") -> str:
    """A file's text, bounded, decrypted when ansible-vault encrypted it (INI inventories can be too)."""
    path = Path(path)
    text = _read_bounded(path, what)
    if vault.is_encrypted(text):
        text = vault.decrypt(text, f"{path} (vault-encrypted {what})")
    return text


def was_encrypted(path: str | Path) -> bool:
    """Whether the file on disk is a vault envelope (read_text gives its plaintext)."""
    try:
        with open(path, "rb") as f:
            return vault.is_encrypted(f.read(64).decode("utf-8", "replace"))
    except OSError:
        return False


# Every string a loaded file (or -e, an INI inventory) wrote, by identity: Ansible's TrustedAsTemplate tag. A
# string that passes through templating unchanged is the same object; one a template, a filter or a host computed
# is a new one, never in here. The load cache keeps these alive for the run.
_written: dict[int, str] = {}


def remember_written(value: Any) -> None:
    """The strings inside `value` (keys too), as written by a person: trusted as templates and expressions."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str) and not isinstance(item, Unsafe):
            _written[id(item)] = item


def is_written(value: Any) -> bool:
    """True for a string a playbook, role, variable file, inventory or -e wrote, handed over unchanged; false for
    what a template computed, a host returned or `!unsafe` tagged (Ansible's `tagged_with('TrustedAsTemplate')`)."""
    return isinstance(value, str) and _written.get(id(value)) is value


def leaf_texts(value: Any) -> list[str]:
    """Every string and number inside a decrypted file (bools and null are not secrets)."""
    out, stack = [], [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, (str, int, float)) and not isinstance(item, bool):
            out.append(str(item))
    return out


def _read_bounded(path: Path, what: str) -> str:
    """The file's text, read no further than MAX_YAML_BYTES (+1 to notice more) even from /dev/zero."""
    return _decoded(_read_raw(path, what), path, what)


def _read_raw(path: Path, what: str) -> bytes:
    """The file's bytes, read no further than MAX_YAML_BYTES (+1 to notice more) even from /dev/zero."""
    try:
        with open(path, "rb") as fh:
            raw = _read_at_most(fh, MAX_YAML_BYTES + 1)
    except FileNotFoundError:
        raise UserError(f"{path}: {what} not found; check the path") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read {what}: {exc.strerror}") from None
    if len(raw) > MAX_YAML_BYTES:
        raise UserError(
            f"{path}: the {what} is larger than {MAX_YAML_BYTES // 2**20} MiB (MAX_YAML_BYTES in engine/parsing/yamlfile.py), "
            "so it is refused unread; real inventories, playbooks and variable files are a few KiB. Check that "
            "the path names the file you meant, or split it (group_vars/, host_vars/, roles)."
        )
    return raw


def _decoded(raw: bytes, path: Path, what: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(
            f"{path}: the {what} is not UTF-8 text (invalid byte at offset {exc.start}); save it as UTF-8 "
            "or check that the path names a YAML file."
        ) from None


def _read_at_most(fh, limit: int) -> bytes:
    """Up to `limit` bytes; sized by fstat for speed, but a device or pipe (size 0) is read in chunks."""
    data = fh.read(min(os.fstat(fh.fileno()).st_size, limit))
    while len(data) < limit:
        more = fh.read(min(1 << 20, limit - len(data)))
        if not more:
            break
        data += more
    return data


def parse_text(text: str, path: Path, what: str, budget: LoadBudget | None = None,
               counted: list[int] | None = None) -> Any:
    """Compose the nodes in C, check their expansion and depth (and charge their count to `budget`, appending
    it to `counted`), then build the Python values."""
    if _nesting_bound(text) > _C_COMPOSER_SAFE_DEPTH or _values_bound(text) > MAX_YAML_NODES:
        _check_events(text, path, what)
    loader = _Loader(text)
    loader.dfp_path = path
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        values = _check_node_graph(node, path, what)
        if counted is not None:
            counted.append(values)
        if budget is not None:
            budget.charge(path, what, values=values)
        return loader.construct_document(node)
    except yaml.MarkedYAMLError as exc:
        raise _syntax_error(exc, path, what) from None
    except yaml.YAMLError as exc:
        raise UserError(f"{path}: malformed YAML: {exc}") from None
    finally:
        loader.dispose()


def _syntax_error(exc: yaml.MarkedYAMLError, path: Path, what: str) -> UserError:
    mark = exc.problem_mark or exc.context_mark
    if exc.problem and "maximum nesting depth" in exc.problem:
        # PyYAML >= 6.0.4 stops deep nesting in its own parser, sometimes before our check sees it: the
        # same limit, so the same message whichever layer meets it first.
        return _too_deep(path, what, mark)
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
    problem = exc.problem or "invalid YAML"
    context = f" ({exc.context})" if exc.context else ""
    return UserError(
        f"{where}: malformed YAML: {problem}{context}. Fix the syntax at that line "
        "(indentation, a missing ':' or an unclosed quote are the usual causes)."
    )


def _nesting_bound(text: str) -> int:
    """A cheap upper bound on the nesting depth, without parsing.

    Block nesting needs at least one more column every two levels, so it is bounded by twice the
    longest line; flow nesting needs one bracket per level.
    """
    longest = max(map(len, text.splitlines()), default=0)
    return 2 * (longest + 1) + text.count("[") + text.count("{")


def _values_bound(text: str) -> int:
    """A cheap upper bound on the values a file holds: each needs a separator (a comma, a colon, a dash, a
    newline or an opening bracket) before or after it."""
    return sum(text.count(c) for c in ",:-\n[{") + 1


def _check_events(text: str, path: Path, what: str) -> None:
    """Measure the nesting and count the values on the parser's events (no recursion, nothing built) before
    libyaml composes nodes: a flat file of millions of values is refused in about a second, in little memory."""
    depth = values = 0
    try:
        for event in yaml.parse(text, Loader=_Loader):
            values += 1
            if values > MAX_YAML_NODES:
                raise UserError(
                    f"{path}: the {what} holds more than {MAX_YAML_NODES:,} values (MAX_YAML_NODES in engine/parsing/yamlfile.py), "
                    "so it is refused unread; real inventories, playbooks and variable files hold a few hundred. Check "
                    "that the path names the file you meant, or split it (group_vars/, host_vars/, roles)."
                )
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_YAML_DEPTH:
                    raise _too_deep(path, what, event.start_mark)
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
    except yaml.MarkedYAMLError as exc:
        raise _syntax_error(exc, path, what) from None
    except yaml.YAMLError as exc:
        raise UserError(f"{path}: malformed YAML: {exc}") from None


def _too_deep(path: Path, what: str, mark=None) -> UserError:
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
    return UserError(
        f"{where}: the {what} nests lists/mappings more than {MAX_YAML_DEPTH} levels deep (MAX_YAML_DEPTH in "
        "engine/parsing/yamlfile.py), or an alias refers to the collection that contains it; flatten the value."
    )


def _check_node_graph(root: Any, path: Path, what: str) -> int:
    """Refuse aliases that expand too far and nesting that is too deep, before any value is built; the count of
    values once every alias is expanded.

    An alias is the same node object reached again, so walking the graph level by level and counting
    every node each time it is reached counts the expanded document; the walk stops at the budget.
    Merge keys (`<<: *a`) are aliases too, so a merge bomb is caught before the constructor copies them.
    """
    level, depth, count = [root], 0, 0
    while level:
        depth += 1
        count += len(level)
        below: list = []
        for node in level:
            cls = type(node)
            if cls is MappingNode:
                below.extend(chain.from_iterable(node.value))
            elif cls is SequenceNode:
                below.extend(node.value)
            else:
                continue
            if depth > MAX_YAML_DEPTH:
                raise _too_deep(path, what, node.start_mark)
            if count + len(below) > MAX_YAML_NODES:
                raise UserError(
                    f"{path}: the {what}'s aliases (*name) expand too far: more than {MAX_YAML_NODES:,} values "
                    "once every alias is replaced by what it refers to (MAX_YAML_NODES in engine/parsing/yamlfile.py). "
                    "This is how a 'billion laughs' file exhausts memory; write the values out, or use fewer "
                    "nested aliases."
                )
        level = below
    return count


def check_nesting(value: Any, where: str) -> None:
    """Refuse a value (e.g. JSON from -e) that nests deeper than MAX_YAML_DEPTH; iterative, so it cannot recurse."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > MAX_YAML_DEPTH:
                raise UserError(
                    f"{where}: the value nests lists/mappings more than {MAX_YAML_DEPTH} levels deep "
                    "(MAX_YAML_DEPTH in engine/parsing/yamlfile.py); flatten it."
                )
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)


def is_variable_name(name: Any) -> bool:
    """A name a template can refer to: a string of letters, digits and '_' not starting with a digit."""
    return isinstance(name, str) and name.isidentifier()


def describe_name(name: Any) -> str:
    """A key as a message shows it: quoted and cut short, with its type when it is not a string."""
    shown = repr(name) if len(repr(name)) <= 60 else repr(name)[:57] + "..."
    if isinstance(name, str):
        return shown
    kind = {bool: "a boolean", int: "a number", float: "a number", type(None): "null"}.get(type(name), type(name).__name__)
    return f"{shown} ({kind}, not a string)"


def check_variable_names(variables: Any, where: str) -> None:
    """Every key of a mapping of variables is a valid name; otherwise one paragraph naming the file and key."""
    for name in variables:
        if not is_variable_name(name):
            raise UserError(
                f"{where}: variable name {describe_name(name)} is not valid; a variable name is a string of "
                "letters, digits and '_' that does not start with a digit (e.g. vllm_port). Rename it "
                "(e.g. port_1 instead of 1, model_path instead of model-path)."
            )
