"""Templates: the sandboxed Jinja2 environment, variables views, lookups, secrets and the taint of what a render read."""
