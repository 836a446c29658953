"""The command line (`invoke provision`, `invoke status`, ...): options, what each command runs, summaries.

tasks.py assembles the Invoke collection from here; the engine knows nothing of these commands.
"""
