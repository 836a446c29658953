"""dflash-provision's control-node runtime: inventory -> playbook -> templating -> transport -> runner -> report.

Each stage is one module and imports only stages before it. Heavy imports (paramiko, jinja2) are done
lazily so that a no-change run stays fast.
"""
