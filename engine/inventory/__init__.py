"""The inventory: YAML, INI and folder forms, host ranges, groups and their variables, host patterns."""
