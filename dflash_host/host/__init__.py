"""The machine itself: processes and pidfiles, GPUs and who holds them, systemd, which paths are the tool's,
atomic file writes, folder manifests and JSON that nobody on the host vouches for."""
