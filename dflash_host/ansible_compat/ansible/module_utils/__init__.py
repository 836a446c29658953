"""The module_utils a playbook's own module may import: basic (AnsibleModule) and the text converters."""
