"""`invoke monitoring --group G --out DIR`: the fleet watched by Prometheus, from the inventory and each host's last
speed record.

hosts.py reads what each host knows (one read-only playbook run: the server's state, its launch, its speed record,
the inventory's monitoring settings) into a HostView; loads.py turns a record's per-load verdicts into the load
bands where the drafter does not pay; targets.py writes the scrape configuration and its file_sd targets; rules.py
the recording and alert rules; command.py is the command. Every file is YAML dumped by PyYAML from data.
"""
