"""`python -m dfp_cli.ansible_playbook`: ansible-playbook's command line, run by this project's engine.

For scripts written for Ansible (ansible-core's own integration targets call `ansible-playbook` dozens of times
each): ansible-playbook's flags become `invoke play`'s options (flags.py), and each run is served by the resident
control node, a process that keeps the engine imported and forks one child per run (client.py, server.py,
child.py; wire.py what both ends share), so a run starts in milliseconds instead of a python start and the
engine's imports. DFP_RESIDENT (seconds, default 60; 0 turns it off) is how long it stays after its last run.
"""
