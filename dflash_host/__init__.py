"""Host-side helpers of the task modules in library/ (Ansible's module_utils): one home for each concern.

module (the contract: ModuleError, Context, check_args, execute, main), files, paths, proc, gpu,
pyenv and installers, untrusted_json and st_header, model_config, and the vLLM server's parts
(vllm_values, vllm_launch, vllm_unit, vllm_files, vllm_process, vllm_log, vllm_metrics, vllm_probe).

Standard library, psutil and tenacity only. The engine ships this package to each host inside the
runtime zip (engine/runtime.py), keyed by a hash of its files, so a host always runs the version the
control node has; the control node imports it directly (engine/preflight.py).
"""
