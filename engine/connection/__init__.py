"""Reaching a host: SSH options and routes, the connection, kept connections (the daemon), the worker and its
protocol, become, the host lock, the runtime sent to hosts."""
