"""Running plays: variables, the checks before any host is touched, batches, each host's start, one task on one
host, engine actions, delegation, the trust rule, results."""
