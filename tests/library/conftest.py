"""tests/library: the helpers the module tests share live in _helpers.py beside this file.

pytest's default import mode already puts this folder on sys.path for the test files; this makes
`from _helpers import ...` work under any import mode (e.g. --import-mode=importlib).
"""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.append(_HERE)
