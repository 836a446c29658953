"""A playbook's own Ansible modules: the files of a `library/` folder beside a playbook (an imported one too) or in
a role, known by their names from the moment that playbook or role is read, as Ansible adds those folders to its
module path. Ours keep their names (a library file named like one of our modules is not used), and the first
library to name a module wins, as Ansible's first-found.

Such a module runs on the host as Ansible runs it (dflash_host/ansible_modules.py, through library/_ansible_module.py):
a python process of its own with this project's stand-in of the module_utils it imports (dflash_host/ansible_compat).
A task naming one is refused at load when it is no Python file, is not written against ansible.module_utils
(AnsibleModule), or imports module_utils (or names in them) that the stand-in does not have. The source travels
from the author's folder on the control node; nothing a host returned ever chooses it."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

from engine.errors import UserError
from engine.playbook.modulespec import add_user_module, modules

RUNNER = "_ansible_module"  # library/_ansible_module.py
# What dflash_host/ansible_compat provides, by module (tests/engine/playbook/test_user_modules.py keeps it true).
CONVERTERS = frozenset({"to_bytes", "to_text", "to_native"})
PROVIDED: dict[str, frozenset[str]] = {
    "ansible.module_utils.basic": frozenset({"AnsibleModule", "env_fallback", "missing_required_lib"}) | CONVERTERS,
    "ansible.module_utils.common.text.converters": CONVERTERS,
    "ansible.module_utils._text": CONVERTERS,
}
PACKAGES = ("ansible", "ansible.module_utils", "ansible.module_utils.common", "ansible.module_utils.common.text")


def add_library(folder: Path) -> None:
    """Each module file of `folder` (if it is one), by its name without `.py`; a `.py` file before another
    language's file of the same name (Ansible's choice on a POSIX host)."""
    if not folder.is_dir():
        return
    for path in sorted(folder.iterdir(), key=lambda p: (p.suffix != ".py", p.name)):
        if path.is_file() and not path.name.startswith((".", "_")):
            add_user_module(path.stem if path.suffix == ".py" else path.name.split(".")[0], path)


def check_user_module(name: str, label: str) -> None:
    """Refuse, naming the file, a library module this tool cannot run."""
    problem = _problem(modules()[name].path)
    if problem:
        raise UserError(f"{label}: the playbook's own module '{name}' ({modules()[name].path}) {problem}; "
                        "dflash-provision runs Python modules written against ansible.module_utils.basic's "
                        "AnsibleModule (and its text converters) only: rewrite it so, or run this playbook with "
                        "ansible-playbook")


@functools.cache
def _problem(path: Path | None) -> str | None:
    """What keeps the module file at `path` from running here, or None."""
    if path is None:
        return "has no file"
    text = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix not in (".py", "") or (path.suffix == "" and not _python_shebang(text)):
        return "is not a Python module"
    try:
        tree = ast.parse(text, filename=str(path))
    except SyntaxError as exc:
        return f"is not valid Python (line {exc.lineno}: {exc.msg})"
    imports = _ansible_imports(tree)
    if not imports:
        return "does not import ansible.module_utils (an old-style or WANT_JSON module)"
    missing = [what for what in imports if what]
    return f"imports {missing[0]}, which this tool does not provide" if missing else None


def _python_shebang(text: str) -> bool:
    first = text.split("\n", 1)[0]
    return first.startswith("#!") and "python" in first


def _ansible_imports(tree: ast.AST) -> list[str]:
    """One entry per `ansible` import of the module: "" when provided, else what is missing."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [_imported(a.name, None) for a in node.names if a.name.split(".")[0] in ("ansible", "ansible_collections")]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] in ("ansible", "ansible_collections"):
                found += [_imported(node.module, a.name) for a in node.names]
    return found


def _imported(module: str, name: str | None) -> str:
    """"" when `from module import name` (or `import module`) works with the stand-in, else what is missing."""
    if name is not None and f"{module}.{name}" in PROVIDED:  # from ansible.module_utils import basic
        return ""
    if module not in PROVIDED and not (name is None and module in PACKAGES):
        return module
    if name is None or name == "*" or name in PROVIDED.get(module, ()):
        return ""
    return f"{module}.{name}"


def user_module_call(name: str, args: dict) -> tuple[str, dict]:
    """(the runner module, its arguments) for one call of the user module `name` with the task's `args`."""
    path = modules()[name].path
    assert path is not None  # noqa: S101 - a user module always has its file (add_library)
    return RUNNER, {"name": name, "source": path.read_text(encoding="utf-8"), "params": args}
