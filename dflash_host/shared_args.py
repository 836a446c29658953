"""Argument entries that several task modules share, written once.

A module's ARGS entry `{"include": NAME, ...}` is SHARED[NAME] with the entry's own keys over it (a module
makes it required, or says in its own help what it does with it). Both sides resolve includes from this one
literal table: the engine after reading a module's ARGS without importing it (engine/playbook/modulespec.py), the
host in check_args (dflash_host/module.py). Standard library only.
"""

from __future__ import annotations

SHARED: dict[str, dict] = {
    "vllm_pidfile": {"type": "path", "default": None, "var": "vllm_pidfile",
                     "help": "the vLLM server's pidfile; its launch files sit beside it (NAME.launch.json, NAME.env)"},
    "dfp_root": {"type": "path", "default": None, "var": "dfp_root",
                 "help": "dfp_root: the files this module writes or reads lie inside it"},
    "nvidia_smi": {"type": "str", "default": None, "var": "nvidia_smi",
                   "help": "the nvidia-smi command; none: nvidia-smi from PATH"},
    "hf_home": {"type": "path", "default": None, "var": "hf_home",
                "help": "the Hugging Face cache the models role fills; a Hub id is looked up there first"},
    "target_revision": {"type": "str", "default": None, "var": "target_revision",
                        "help": "the target's commit, branch or tag (none: main)"},
    "drafter_revision": {"type": "str", "default": None, "var": "drafter_revision",
                         "help": "the drafter's commit, branch or tag (none: main)"},
    "hf_token_file": {"type": "path", "default": None, "var": "hf_token_file",
                      "help": "a file on the host holding the Hugging Face token"},
    "find_links": {"type": "list", "default": None, "var": "find_links",
                   "help": "folders on the host or URLs holding wheels (e.g. /opt/wheels for torch==2.13.0+cpu)"},
    "fallback_index_urls": {"type": "list", "default": None, "var": "fallback_index_urls",
                            "help": "more package indexes, asked where no find_links folder exists on the host or "
                                    "none has a wheel the install needs (e.g. PyTorch's CPU index)"},
    # command and shell (library/command.py, library/shell.py): ansible.builtin.command's options and ours
    "command_chdir": {"type": "path", "default": None,
                      "help": "working folder (relative creates/removes are taken from it)"},
    "command_creates": {"type": "path", "default": None,
                        "help": "a path or glob pattern: when it matches, the command is not run (changed false, rc 0)"},
    "command_removes": {"type": "path", "default": None,
                        "help": "a path or glob pattern: when it matches nothing, the command is not run (changed "
                                "false, rc 0); checked after creates"},
    "command_stdin": {"type": "str", "default": None,
                      "help": "text fed to the program's standard input (else it reads from /dev/null)"},
    "command_stdin_add_newline": {"type": "bool", "default": True, "help": "add a newline to a non-empty stdin"},
    "command_strip_empty_ends": {"type": "bool", "default": True,
                                 "help": "strip the line ends at the end of stdout and stderr (as Ansible does)"},
    "command_env": {"type": "dict", "default": None, "help": "variables added to the inherited environment"},
    "command_timeout_s": {"type": "float", "default": None,
                          "help": "stop the program's whole process group after this many seconds; a failure"},
    "command_expect_rc": {"type": "list", "default": [0], "help": "return codes that count as success"},
    "command_check_safe": {"type": "bool", "default": False,
                           "help": "the command only reads: run it in check mode too"},
}


class UnknownInclude(KeyError):
    """An ARGS entry includes a name SHARED does not have."""


def resolve_entries(spec: dict) -> dict:
    """ARGS with every include replaced by the shared entry, the module's own keys over it."""
    if not any(isinstance(opts, dict) and "include" in opts for opts in spec.values()):
        return spec
    out = {}
    for name, opts in spec.items():
        if isinstance(opts, dict) and "include" in opts:
            base = SHARED.get(opts["include"])
            if base is None:
                raise UnknownInclude(f"argument {name!r} includes {opts['include']!r}, which dflash_host/shared_args.py "
                                     f"does not define (it has: {', '.join(sorted(SHARED))})")
            opts = {**base, **{k: v for k, v in opts.items() if k != "include"}}
        out[name] = opts
    return out
