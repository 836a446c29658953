"""Reading input files: YAML with its limits, Ansible Vault. The first stage: imports only engine.errors."""
