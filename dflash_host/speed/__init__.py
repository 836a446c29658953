"""Whether the drafter pays: `vllm bench serve` and the built-in load client, a run's figures, speed-ups and
the gate's k, the launch variants measured, the host's speed record and its Prometheus textfile."""
