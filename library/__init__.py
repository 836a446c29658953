"""Task modules: one file per module a task can call (`file`, `copy`, `vllm_server`, ...).

Each imports helpers only from the dflash_host package, never another task module. The engine
sends a module's own source to the host's worker, which loads it as dfp_task_NAME; by hand, run
`python3 -m library.NAME ARGS.json [--check] [--diff]` from the repository root.
"""
