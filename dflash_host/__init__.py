"""Host-side helpers of the task modules in library/ (Ansible's module_utils), grouped by subject.

  module   the contract every task module runs under: ModuleError, Context, check_args, execute, main
  host/    the machine: processes and pidfiles, GPUs, systemd, the tool's own paths, files, manifests, untrusted JSON
  models/  the model locator and config.json reader, safetensors headers, the drafter's shape and choices, the Hub fetch
  env/     serving environments: interpreter probes, installers, the build, the folder layout, purging, flash-attn rules
  vllm/    the managed vLLM server (and a measurement server beside it), behind one narrow front (dflash_host.vllm)
  speed/   whether the drafter pays: the load generators, a run's figures, speed-ups, the speed record

Imports: names are imported from the module that defines them (`from dflash_host.host.files import
atomic_write`); a module is imported whole only under its own name (`from dflash_host.host import systemd`);
no aliases. Everything outside dflash_host/vllm/ (task modules, speed/) imports the server's names from the front
only (tests/library/test_imports.py).

Standard library, psutil and tenacity only. The engine ships this package to each host inside the
runtime zip (engine/connection/runtime.py), keyed by a hash of its files, so a host always runs the version the
control node has; the control node imports it directly (engine/run/preflight.py).
"""
