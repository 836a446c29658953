"""Hand the standard library's module over when a stdlib import finds a library/ file of the same name.

library/copy.py and library/stat.py are named like stdlib modules. When a task module runs by hand
(`python3 library/NAME.py ARGS.json`), library/ is sys.path[0], so a stdlib `import copy` (from
dataclasses, urllib, ...) finds library/copy.py first. Such a file starts with

    if __name__ == "copy":
        import _stdlib_guard
        _stdlib_guard.hand_over(__name__, __file__)

and the importer then gets the real module instead. Only the import system's own (always loaded)
modules are used here: `os` may be half-imported at this point. The engine's worker loads task
modules under other names than their file's (dfp_task_NAME), so it never takes this path.
"""

import _frozen_importlib as _bootstrap
import _frozen_importlib_external as _external
import sys


def hand_over(name: str, file: str) -> None:
    """Put the stdlib module `name` in sys.modules, in place of the library file `file` being imported."""
    here = file.rpartition("/")[0].rstrip("/") or "."
    spec = _external.PathFinder.find_spec(name, [p for p in sys.path if (p or ".").rstrip("/") != here])
    module = _bootstrap.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
