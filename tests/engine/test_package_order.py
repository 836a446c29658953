"""The engine's stages form a straight line (docs/ARCHITECTURE.md, "The engine, by stage"): this keeps it true.

- every engine module lives in a stage package, or is one of the few root modules (errors and the cache folder
  below every stage, api.py the one door above them);
- no import reaches a later stage: not at the top of a file, not inside a function, not for type checking;
- the modules' runtime imports (those outside `if TYPE_CHECKING:`) form no circle, inside a stage either;
- the map in docs/ARCHITECTURE.md names every engine file, and names none that is gone;
- nothing outside the engine imports its stages: dfp_cli/ and bench/ go through engine.api (tests may reach in);
- no engine import renames a module or a name of the project (`as`).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENGINE = ROOT / "engine"
STAGES = ("parsing", "template", "inventory", "playbook", "connection", "run", "report")
BELOW = ("engine", "engine.errors", "engine.cache")  # what every stage may import
ABOVE = ("engine.api",)  # the door: imports any stage, imported by none


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def rank(module: str) -> int:
    """0 below the stages, 1.. a stage in order, one past the last: the door."""
    if module in BELOW:
        return 0
    if module in ABOVE:
        return len(STAGES) + 1
    stage = module.split(".")[1]
    assert stage in STAGES, f"{module}: not in a stage package ({', '.join(STAGES)}), nor a root module"
    return STAGES.index(stage) + 1


def _type_checking_blocks(tree: ast.Module) -> set[int]:
    """ids of the import nodes under `if TYPE_CHECKING:` (read only by type checkers)."""
    inside = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            inside |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return inside


def engine_imports(path: Path) -> list[tuple[str, bool, int]]:
    """(engine module imported, at runtime?, line) for each import in the file: `from engine.x import y` gives
    engine.x.y when that is a module, else engine.x."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    typing_only = _type_checking_blocks(tree)
    found = []
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "engine":
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                targets.append(sub if _is_module(sub) else node.module)
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names if a.name.split(".")[0] == "engine"]
        found += [(t, id(node) not in typing_only, node.lineno) for t in targets]
    return found


def _is_module(name: str) -> bool:
    base = ROOT.joinpath(*name.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def engine_files() -> list[Path]:
    return sorted(p for p in ENGINE.rglob("*.py") if "__pycache__" not in p.parts)


def test_every_module_is_in_a_stage_or_a_root_module():
    for path in engine_files():
        rank(module_name(path))


def test_no_import_reaches_a_later_stage():
    upward = []
    for path in engine_files():
        here = module_name(path)
        for target, _runtime, line in engine_imports(path):
            if rank(target) > rank(here) and target != "engine":
                upward.append(f"{path.relative_to(ROOT)}:{line} imports {target}")
    assert not upward, "an earlier stage imports a later one (move the name down, or hand it over): " + "; ".join(upward)


def runtime_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in engine_files():
        here = module_name(path)
        graph[here] = {t for t, runtime, _ in engine_imports(path) if runtime and t not in (here, "engine")}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One circle of the graph, or None (depth-first, three colours)."""
    colour: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        colour[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if colour.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if not colour.get(nxt):
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        colour[node] = 2
        return None

    for start in sorted(graph):
        if not colour.get(start):
            found = visit(start)
            if found:
                return found
    return None


def test_runtime_imports_form_no_circle():
    cycle = find_cycle(runtime_graph())
    assert cycle is None, "import circle: " + " -> ".join(cycle or [])


def test_the_cycle_finder_finds_a_circle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def architecture_map() -> dict[str, set[str]]:
    """The file names docs/ARCHITECTURE.md's engine map lists under each stage folder (and the root files)."""
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    block = text.split("## The engine, by stage", 1)[1].split("```")[1]
    listed: dict[str, set[str]] = {}
    stage = ""
    for line in block.splitlines():
        head = line.split()[0] if line.strip() else ""
        if head.startswith("engine/"):
            stage = head.split("/")[1] if head.endswith("/") else ""
            if not stage:
                listed.setdefault("", set()).update(re.findall(r"engine/([a-z_]+\.py)", line))
                continue
        listed.setdefault(stage, set()).update(re.findall(r"\b([a-z_]+\.py)\b", line))
    return listed


def test_the_architecture_map_names_every_engine_file_and_only_those():
    listed = architecture_map()
    actual: dict[str, set[str]] = {}
    for path in engine_files():
        parts = path.relative_to(ENGINE).parts
        if path.name != "__init__.py":
            actual.setdefault(parts[0] if len(parts) > 1 else "", set()).add(path.name)
    for stage in sorted(set(listed) | set(actual)):
        missing, gone = actual.get(stage, set()) - listed.get(stage, set()), listed.get(stage, set()) - actual.get(stage, set())
        assert not missing, f"docs/ARCHITECTURE.md's engine map does not name {sorted(missing)} under engine/{stage}"
        assert not gone, f"docs/ARCHITECTURE.md's engine map names {sorted(gone)} under engine/{stage}: not there"


@pytest.mark.parametrize("folder", ["dfp_cli", "bench"])
def test_the_cli_and_the_benchmark_enter_through_the_door(folder):
    reached = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        for target, _runtime, line in engine_imports(path):
            # engine.connection.user_socket: the resident client's socket folder and peer check, stdlib only; the
            # client must not import engine.api (its whole start is about 25 ms: dfp_cli/ansible_playbook/client.py)
            if target not in ("engine.api", "engine.errors", "engine.connection.user_socket"):
                reached.append(f"{path.relative_to(ROOT)}:{line} {target}")
    assert not reached, f"{folder}/ imports engine stages directly; add what it needs to engine/api.py: {reached}"


def test_tests_mirror_the_stages():
    folders = {p.name for p in (ROOT / "tests" / "engine").iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders <= set(STAGES), f"tests/engine/ has folders that are no stage: {sorted(folders - set(STAGES))}"
    loose = sorted(p.name for p in (ROOT / "tests" / "engine").glob("test_*.py"))
    assert loose == ["test_layers.py", "test_package_order.py"], f"engine tests outside a stage's folder: {loose}"


def test_no_engine_import_renames():
    renamed = []
    for path in engine_files():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                module = getattr(node, "module", None) or ""
                names = [a for a in node.names if a.asname]
                if module.startswith("engine") or any(a.name.startswith("engine") for a in names):
                    renamed += [f"{path.relative_to(ROOT)}:{node.lineno} {a.name} as {a.asname}" for a in names]
    assert not renamed, renamed
