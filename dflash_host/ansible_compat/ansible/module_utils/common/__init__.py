"""ansible.module_utils.common: only text.converters here."""
