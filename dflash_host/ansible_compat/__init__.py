"""What a playbook's own Ansible module imports (`from ansible.module_utils.basic import AnsibleModule`), written
for this project: this folder goes first on the module process's PYTHONPATH (dflash_host/ansible_modules.py), so
`ansible` there is this package, never an ansible-core the host may have."""
