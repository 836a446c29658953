"""Stand-in package: see tests/fakes/fake_vllm.py."""
