"""Playbooks as loaded: plays, blocks, tasks, roles, keyword checks, module argument tables, the listings."""
