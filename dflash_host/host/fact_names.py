"""The names Ansible's facts are gathered under (dflash_host/host/ansible_facts.py computes them): apart, so that
the control node knows them before any host answered (engine/run/variables.py: a play may read them) without
importing what computes them."""

from __future__ import annotations

# Every top-level name gathering may give (without the per-interface `ansible_<device>` ones): what a play may read
# before any host answered (engine/run/preflight.py).
FACT_NAMES = frozenset(f"ansible_{n}" for n in (
    "apparmor", "cmdline", "proc_cmdline", "date_time", "distribution", "distribution_version",
    "distribution_major_version", "distribution_minor_version", "distribution_release", "distribution_file_path",
    "distribution_file_variety", "distribution_file_parsed", "os_family", "dns", "env", "fips", "local", "pkg_mgr",
    "system", "kernel", "kernel_version", "machine", "python_version", "fqdn", "hostname", "nodename", "domain",
    "userspace_bits", "architecture", "userspace_architecture", "machine_id", "python", "selinux",
    "selinux_python_present", "service_mgr", "user_id", "user_uid", "user_gid", "user_gecos", "user_dir",
    "user_shell", "real_user_id", "effective_user_id", "real_group_id", "effective_group_id", "is_chroot",
    "loadavg", "processor", "processor_count", "processor_cores", "processor_threads_per_core", "processor_vcpus",
    "processor_nproc", "flags", "memtotal_mb", "memfree_mb", "swaptotal_mb", "swapfree_mb", "memory_mb", "uptime_seconds",
    "interfaces", "default_ipv4", "ssh_host_key_rsa_public", "ssh_host_key_rsa_public_keytype",
    "ssh_host_key_ecdsa_public", "ssh_host_key_ecdsa_public_keytype", "ssh_host_key_ed25519_public",
    "ssh_host_key_ed25519_public_keytype", "ssh_host_key_dsa_public", "ssh_host_key_dsa_public_keytype",
)) | {"module_setup", "gather_subset"}
