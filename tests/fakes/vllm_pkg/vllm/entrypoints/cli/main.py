"""`python -m vllm.entrypoints.cli.main serve ...` lands here when tests/fakes/vllm_pkg is on PYTHONPATH."""

import os
import runpy
import sys

FAKE = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "fake_vllm.py"))
sys.argv = [FAKE] + sys.argv[1:]
runpy.run_path(FAKE, run_name="__main__")
