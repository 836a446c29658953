"""ansible.module_utils.common.text: only converters here."""
