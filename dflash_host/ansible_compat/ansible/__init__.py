"""This project's stand-in for the `ansible` package a playbook's own module imports (module_utils only)."""
