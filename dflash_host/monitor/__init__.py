"""The host agent: what node_exporter's textfile collector exports about a GPU host between the tool's runs.

`python3 -m dflash_host.monitor --dfp-root R --textfile-dir D [--pidfile P] [--nvidia-smi PATH] [--every S]`
writes D/dflash_host.prom (readings.py reads, textfile.py writes): each GPU's memory used and total (nvidia-smi,
dflash_host.host.gpus), whether the tool's own vLLM server runs (its pidfile or unit, as `invoke status` decides),
and the k (and tune's per-batch-size schedule) of the launch that server was started from. The speed figures stay
in dflash.prom (dflash_host.speed); this file holds what changes without a measurement. library/host_metrics.py runs
one write through the engine; a monitoring role keeps the loop (--every) running. Standard library + psutil +
tenacity only, like all host-side code.
"""
