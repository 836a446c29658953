"""`python -m dfp_cli.ansible_playbook PLAYBOOK... [ansible-playbook's flags]`: the light client, nothing heavy
imported before it knows whether the resident control node serves the run."""

import sys

from dfp_cli.ansible_playbook.client import main

sys.exit(main(sys.argv[1:]))
