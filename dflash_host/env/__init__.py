"""Serving environments: the interpreter probes and command runner, installers (uv, pip), the build and
its journal, the environments' folder layout and lock, purging, and the flash-attn line rules."""
