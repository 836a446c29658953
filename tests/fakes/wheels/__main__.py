"""python3 -m tests.fakes.wheels OUT_DIR: write the standard set of fake wheels into OUT_DIR."""

import sys

from tests.fakes.wheels import standard_set

for path in standard_set(sys.argv[1] if len(sys.argv) > 1 else "."):
    print(path)
