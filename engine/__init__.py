"""dflash-provision's control-node runtime, one package per stage: parsing -> template -> inventory -> playbook ->
connection -> run -> report, and api.py the one door (docs/ARCHITECTURE.md, "The engine, by stage").

Each stage imports only the stages before it (tests/engine/test_package_order.py). Heavy imports (paramiko) are
done lazily so that a no-change run stays fast.
"""
