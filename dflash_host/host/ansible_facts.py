"""The host's facts under Ansible's names (`ansible_distribution`, `ansible_python`, `ansible_memtotal_mb`...), computed
as ansible-core's setup module computes them, with the standard library only: /proc, /sys and /etc read directly, no
program run, so gathering stays fast.

Playbooks written for Ansible read these names (`when: ansible_os_family == "Debian"`); the tool's own roles read the
`facts` variable instead (library/facts.py). Facts are grouped in Ansible's subsets so that `gather_subset` chooses
among them as Ansible's does; a subset we do not compute (`virtual`, `facter`, ...) is accepted and gives nothing.
"""

from __future__ import annotations

import datetime
import fcntl
import fnmatch
import getpass
import importlib.util
import os
import platform
import pwd
import shlex
import shutil
import socket
import struct
import sys
import time
from typing import Callable

# Ansible's own subset names (ansible-core's valid gather_subset values, collectors and their aliases).
MINIMAL = ("apparmor", "caps", "cmdline", "date_time", "distribution", "dns", "env", "fips", "local", "lsb",
           "pkg_mgr", "platform", "python", "selinux", "service_mgr", "ssh_pub_keys", "user")
VALID = frozenset((*MINIMAL, "all", "min", "hardware", "network", "virtual", "ohai", "facter", "chroot", "loadavg",
                   "systemd", "devices", "dmi", "mounts", "interfaces", "iscsi", "nvme", "fibre_channel_wwn", "lvm"))
# Which subset a broader name includes (hardware covers devices, mounts...: computed here only in part).
ALIASES = {"hardware": ("hardware", "devices", "dmi", "mounts", "lvm"), "network": ("network", "interfaces")}

OS_FAMILY_NAMES = {
    "RedHat": ("RedHat", "RHEL", "Fedora", "CentOS", "Scientific", "SLC", "Ascendos", "CloudLinux", "PSBM",
               "OracleLinux", "OVS", "OEL", "Amazon", "Amzn", "Virtuozzo", "XenServer", "Alibaba", "EulerOS",
               "openEuler", "AlmaLinux", "Rocky", "TencentOS", "EuroLinux", "Kylin Linux Advanced Server", "MIRACLE"),
    "Debian": ("Debian", "Ubuntu", "Raspbian", "Neon", "KDE neon", "Linux Mint", "SteamOS", "Devuan", "Kali",
               "Cumulus Linux", "Pop!_OS", "Parrot", "Pardus GNU/Linux", "Uos", "Deepin", "OSMC",
               "Linux Mint Debian Edition"),
    "Suse": ("SuSE", "SLES", "SLED", "openSUSE", "openSUSE Tumbleweed", "SLES_SAP", "SUSE_LINUX", "openSUSE Leap",
             "ALP-Dolomite", "SL-Micro", "openSUSE MicroOS"),
    "Archlinux": ("Archlinux", "Antergos", "Manjaro"),
    "Mandrake": ("Mandrake", "Mandriva"),
    "Gentoo": ("Gentoo", "Funtoo"),
    "Alpine": ("Alpine",),
    "Slackware": ("Slackware",),
    "Altlinux": ("Altlinux",),
    "ClearLinux": ("Clear Linux OS", "Clear Linux Mix"),
}
OS_FAMILY = {name: family for family, names in OS_FAMILY_NAMES.items() for name in names}
# os-release IDs whose distribution name is not the ID capitalized (the names Ansible reports for them).
DISTRIBUTION_NAMES = {"amzn": "Amazon", "rhel": "RedHat", "centos": "CentOS", "ol": "OracleLinux",
                      "almalinux": "AlmaLinux", "opensuse-leap": "openSUSE Leap", "opensuse-tumbleweed":
                      "openSUSE Tumbleweed", "sles": "SLES", "arch": "Archlinux", "linuxmint": "Linux Mint",
                      "pop": "Pop!_OS", "rocky": "Rocky", "debian": "Debian", "ubuntu": "Ubuntu", "fedora": "Fedora"}
# Paths whose presence names the package manager (the last one present wins, as in Ansible).
PKG_MGRS = (("/usr/bin/rpm-ostree", "atomic_container"), ("/usr/bin/yum", "dnf"), ("/usr/bin/dnf-3", "dnf"),
            ("/usr/bin/dnf5", "dnf5"), ("/usr/bin/apt-get", "apt"), ("/usr/bin/zypper", "zypper"),
            ("/usr/sbin/urpmi", "urpmi"), ("/usr/bin/pacman", "pacman"), ("/bin/opkg", "opkg"),
            ("/usr/pkg/bin/pkgin", "pkgin"), ("/opt/local/bin/pkgin", "pkgin"), ("/opt/tools/bin/pkgin", "pkgin"),
            ("/opt/local/bin/port", "macports"), ("/usr/local/bin/brew", "homebrew"),
            ("/opt/homebrew/bin/brew", "homebrew"), ("/sbin/apk", "apk"), ("/usr/sbin/pkg", "pkgng"),
            ("/usr/sbin/swlist", "swdepot"), ("/usr/bin/emerge", "portage"), ("/usr/sbin/pkgadd", "svr4pkg"),
            ("/usr/bin/pkg", "pkg5"), ("/usr/bin/xbps-install", "xbps"), ("/usr/local/sbin/pkg", "pkgng"),
            ("/usr/bin/swupd", "swupd"), ("/usr/sbin/sorcery", "sorcery"), ("/usr/bin/installp", "installp"))
INIT_NAMES = {"procd": "openwrt_init", "runit-init": "runit", "svscan": "svc", "openrc-init": "openrc"}
INTERFACE_TYPES = {"1": "ether", "32": "infiniband", "512": "ppp", "772": "loopback", "65534": "tunnel"}



class BadSubset(ValueError):
    """A gather_subset name Ansible does not know."""


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read().strip()
    except OSError:
        return None


# -- which subsets ---------------------------------------------------------------------------------------------
def chosen_subsets(gather_subset: list[str]) -> set[str]:
    """The subsets a gather_subset list asks for, read as Ansible reads it: `min` always unless `!min`, `all`,
    `!NAME` removes NAME unless it is also named, `!all` leaves the minimal ones."""
    every = VALID - {"all", "min"}
    added: set[str] = set()
    removed: set[str] = set()
    named: set[str] = set()
    for entry in ["min", *(gather_subset or ["all"])]:
        negated = entry.startswith("!")
        name = entry[1:] if negated else entry
        if name not in VALID:
            raise BadSubset(f"Bad subset '{name}' given to Ansible. gather_subset options allowed: all, "
                            f"{', '.join(sorted(VALID - {'all'}))}")
        group = _subset_group(name, negated, every)
        if negated:
            removed |= group
        else:
            added |= group
            if name not in ("min", "all"):
                named |= group
    return set(added or every) - (removed - named)


def _subset_group(name: str, negated: bool, every: frozenset) -> set[str]:
    """The subsets one gather_subset entry names (`!all` spares the minimal ones, `!hardware` removes its parts too,
    as in Ansible)."""
    if name == "min":
        return set(MINIMAL)
    if name == "all":
        return set(every - set(MINIMAL)) if negated else set(every)
    return set(ALIASES.get(name, (name,))) if negated else {name}


def filtered(facts: dict, patterns: list[str]) -> dict:
    """The facts whose name matches one of the fnmatch patterns (none: all of them), as setup's `filter`."""
    if not patterns or patterns == ["*"]:
        return facts
    return {k: v for k, v in facts.items() if any(not p or fnmatch.fnmatch(k, p) for p in patterns)}


# -- the minimal subsets -----------------------------------------------------------------------------------------
def platform_facts() -> dict:
    uname = platform.uname()
    fqdn = socket.getfqdn()
    bits = str(struct.calcsize("P") * 8)  # what platform.architecture() reports, without running `file`
    out = {
        "system": uname.system, "kernel": uname.release, "kernel_version": uname.version, "machine": uname.machine,
        "python_version": platform.python_version(), "fqdn": fqdn, "hostname": uname.node.split(".")[0],
        "nodename": uname.node, "domain": ".".join(fqdn.split(".")[1:]), "userspace_bits": bits,
        "architecture": uname.machine,
    }
    if uname.machine == "x86_64":
        out["userspace_architecture"] = {"64": "x86_64", "32": "i386"}.get(bits, uname.machine)
    machine_id = _read("/var/lib/dbus/machine-id") or _read("/etc/machine-id")
    if machine_id:
        out["machine_id"] = machine_id.splitlines()[0]
    return out


def parse_os_release(text: str) -> dict:
    """KEY=value lines of an os-release file (values may be quoted)."""
    out = {}
    for line in text.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and key and not key.startswith("#"):
            value = value.strip()
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
                value = value[1:-1]
            out[key] = value
    return out


def distribution_facts(os_release: str | None = None, debian_version: str | None = None) -> dict:
    """distribution, its version, major/minor version, release (codename) and os_family, from /etc/os-release as
    Ansible reads it (Debian's minor version from /etc/debian_version)."""
    system = platform.system()
    text = _read("/etc/os-release") if os_release is None else os_release
    if system != "Linux" or not text:
        return {"distribution": system, "distribution_release": platform.release(),
                "distribution_version": platform.version(), "os_family": system}
    rel = parse_os_release(text)
    ident = rel.get("ID", "").lower()
    name = DISTRIBUTION_NAMES.get(ident, ident.capitalize()) or "OtherLinux"
    version = rel.get("VERSION_ID", "")
    codename = rel.get("VERSION_CODENAME") or rel.get("UBUNTU_CODENAME")
    if codename is None and "(" in rel.get("VERSION", ""):
        codename = rel["VERSION"].split("(", 1)[1].split(")")[0].split(",")[0].strip().split()[0].lower()
    out = {"distribution": name, "distribution_version": version or "NA",
           "distribution_release": "NA" if codename is None else codename,
           "distribution_major_version": version.split(".")[0] or "NA"}
    if ident == "debian":
        dv = _read("/etc/debian_version") if debian_version is None else debian_version
        parts = (dv or "").strip().split(".")
        if len(parts) >= 2 and parts[0].isdigit() and parts[1].isdigit():
            out["distribution_version"] = f"{parts[0]}.{parts[1]}"
            out["distribution_minor_version"] = parts[1]
        out.update(distribution_file_path="/etc/os-release", distribution_file_variety="Debian",
                   distribution_file_parsed=True)
    out["os_family"] = OS_FAMILY.get(name, name)
    return out


def python_facts() -> dict:
    v = sys.version_info
    has_ssl = importlib.util.find_spec("ssl") is not None  # found, not imported: importing it costs 15 ms
    return {"python": {
        "version": {"major": v[0], "minor": v[1], "micro": v[2], "releaselevel": v[3], "serial": v[4]},
        "version_info": list(v), "executable": sys.executable, "has_sslcontext": has_ssl,
        "type": sys.implementation.name,
    }}


def user_facts() -> dict:
    try:
        name = getpass.getuser()
        entry = pwd.getpwnam(name)
    except (KeyError, OSError):
        entry = pwd.getpwuid(os.getuid())
        name = entry.pw_name
    return {"user_id": name, "user_uid": entry.pw_uid, "user_gid": entry.pw_gid, "user_gecos": entry.pw_gecos,
            "user_dir": entry.pw_dir, "user_shell": entry.pw_shell, "real_user_id": os.getuid(),
            "effective_user_id": os.geteuid(), "real_group_id": os.getgid(), "effective_group_id": os.getgid()}


def date_time_facts(now_ts: float | None = None) -> dict:
    ts = time.time() if now_ts is None else now_ts
    now = datetime.datetime.fromtimestamp(ts)
    utc = datetime.datetime.fromtimestamp(ts, tz=datetime.timezone.utc)
    fmt = now.strftime
    return {"date_time": {
        "year": fmt("%Y"), "month": fmt("%m"), "weekday": fmt("%A"), "weekday_number": fmt("%w"),
        "weeknumber": fmt("%W"), "day": fmt("%d"), "hour": fmt("%H"), "minute": fmt("%M"), "second": fmt("%S"),
        "epoch": str(int(ts)), "epoch_int": str(int(ts)), "date": fmt("%Y-%m-%d"), "time": fmt("%H:%M:%S"),
        "iso8601_micro": utc.strftime("%Y-%m-%dT%H:%M:%S.%fZ"), "iso8601": utc.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "iso8601_basic": fmt("%Y%m%dT%H%M%S%f"), "iso8601_basic_short": fmt("%Y%m%dT%H%M%S"),
        "tz": time.strftime("%Z"), "tz_dst": time.tzname[1], "tz_offset": time.strftime("%z"),
    }}


def pkg_mgr_facts(os_family: str) -> dict:
    name = "unknown"
    for path, mgr in PKG_MGRS:
        if os.path.exists(path):
            name = mgr
    if os_family == "RedHat":
        name = "atomic_container" if os.path.exists("/run/ostree-booted") else next(
            ("dnf5" if os.path.realpath(p) == "/usr/bin/dnf5" else "dnf"
             for p in ("/usr/bin/dnf", "/usr/bin/microdnf") if os.path.exists(p)), "unknown")
    elif os_family == "Debian":
        name = "apt"
    return {"pkg_mgr": name}


def service_mgr_facts(system: str) -> dict:
    """PID 1's name (a known alias mapped), else systemd / upstart / openrc / sysvinit by their marks, else
    `service`, as Ansible decides."""
    proc_1 = _read("/proc/1/comm")
    if proc_1 is None and os.path.islink("/sbin/init"):
        proc_1 = os.readlink("/sbin/init")
    proc_1 = os.path.basename(proc_1).strip() if proc_1 else None
    if proc_1 and proc_1 != "init" and not proc_1.endswith("sh"):
        return {"service_mgr": INIT_NAMES.get(proc_1, proc_1)}
    name = "service"
    if system == "Linux":
        systemctl = shutil.which("systemctl") is not None
        if systemctl and any(os.path.exists(p) for p in ("/run/systemd/system/", "/dev/.run/systemd/", "/dev/.systemd/")):
            name = "systemd"
        elif shutil.which("initctl") and os.path.exists("/etc/init/"):
            name = "upstart"
        elif os.path.exists("/sbin/openrc"):
            name = "openrc"
        elif systemctl and os.path.islink("/sbin/init") and os.path.basename(os.readlink("/sbin/init")) == "systemd":
            name = "systemd"
        elif os.path.exists("/etc/init.d/"):
            name = "sysvinit"
        elif os.path.exists("/etc/dinit.d/"):
            name = "dinit"
    return {"service_mgr": name}


def selinux_facts() -> dict:
    """From the selinux filesystem; without libselinux on the host Ansible says its python library is missing."""
    if not _has_libselinux():
        return {"selinux": {"status": "Missing selinux Python library"}, "selinux_python_present": False}
    enforce = _read("/sys/fs/selinux/enforce")
    if enforce is None:
        return {"selinux": {"status": "disabled"}, "selinux_python_present": True}
    modes = {"1": "enforcing", "0": "permissive"}
    config = parse_os_release(_read("/etc/selinux/config") or "")
    return {"selinux": {"status": "enabled", "policyvers": int(_read("/sys/fs/selinux/policyvers") or 0) or "unknown",
                        "config_mode": config.get("SELINUX", "unknown"), "mode": modes.get(enforce, "unknown"),
                        "type": config.get("SELINUXTYPE", "unknown")},
            "selinux_python_present": True}


def _has_libselinux() -> bool:
    """Whether the host has libselinux (what Ansible's selinux facts load), looked for where the loader finds it."""
    arch = getattr(sys.implementation, "_multiarch", None) or f"{platform.machine()}-linux-gnu"
    folders = ("/lib", "/lib64", "/usr/lib", "/usr/lib64", f"/lib/{arch}", f"/usr/lib/{arch}")
    return any(os.path.exists(f"{d}/libselinux.so.1") for d in folders)


def parse_cmdline(text: str, repeated_as_list: bool) -> dict:
    """/proc/cmdline as {key: value or True}; a key given again: the last value, or all of them as a list."""
    out: dict = {}
    try:
        pieces = shlex.split(text, posix=False)
    except ValueError:
        return out
    for piece in pieces:
        key, sep, value = piece.partition("=")
        if not sep:
            out[key] = True
        elif repeated_as_list and key in out:
            out[key] = [*out[key], value] if isinstance(out[key], list) else [out[key], value]
        else:
            out[key] = value
    return out


def cmdline_facts() -> dict:
    text = _read("/proc/cmdline")
    if not text:
        return {}
    return {"cmdline": parse_cmdline(text, False), "proc_cmdline": parse_cmdline(text, True)}


def parse_resolv_conf(text: str) -> dict:
    dns: dict = {}
    for line in text.splitlines():
        tokens = line.split()
        if not tokens or line.startswith(("#", ";")):
            continue
        key, rest = tokens[0], tokens[1:]
        if key == "nameserver":
            dns.setdefault("nameservers", []).extend(rest)
        elif key == "domain" and rest:
            dns["domain"] = rest[0]
        elif key in ("search", "sortlist"):
            dns[key] = list(rest)
        elif key == "options":
            dns["options"] = {k: (v if sep else True) for k, sep, v in (o.partition(":") for o in rest)}
    return dns


def ssh_pub_keys_facts() -> dict:
    out = {}
    for algo in ("dsa", "rsa", "ecdsa", "ed25519"):
        for folder in ("/etc/ssh", "/etc/openssh", "/etc"):
            text = _read(f"{folder}/ssh_host_{algo}_key.pub")
            if text:
                parts = text.split()
                if len(parts) >= 2:
                    out[f"ssh_host_key_{algo}_public"] = parts[1]
                    out[f"ssh_host_key_{algo}_public_keytype"] = parts[0]
                break
    return out


def minimal_facts(subsets: set[str]) -> dict:
    """The subsets of Ansible's `min` that were chosen."""
    out: dict = {}
    makers: dict[str, Callable[[], dict]] = {
        "platform": platform_facts, "distribution": distribution_facts, "python": python_facts, "user": user_facts,
        "date_time": date_time_facts, "selinux": selinux_facts, "cmdline": cmdline_facts,
        "ssh_pub_keys": ssh_pub_keys_facts,
        "env": lambda: {"env": dict(os.environ)},
        "apparmor": lambda: {"apparmor": {"status": "enabled" if os.path.exists("/sys/kernel/security/apparmor")
                                          else "disabled"}},
        "fips": lambda: {"fips": _read("/proc/sys/crypto/fips_enabled") == "1"},
        "dns": lambda: {"dns": parse_resolv_conf(_read("/etc/resolv.conf") or "")},
        "local": lambda: {"local": {}},
    }
    for name, make in makers.items():
        if name in subsets:
            out.update(make())
    if "pkg_mgr" in subsets:
        out.update(pkg_mgr_facts(out.get("os_family") or distribution_facts()["os_family"]))
    if "service_mgr" in subsets:
        out.update(service_mgr_facts(platform.system()))
    return out


# -- hardware ----------------------------------------------------------------------------------------------------
def parse_cpuinfo(text: str, architecture: str) -> dict:
    """processor (the vendor/model lines), count (sockets), cores per socket, threads per core and vcpus, read
    from /proc/cpuinfo as Ansible reads it."""
    processor: list[str] = []
    vendors = models = processors = 0
    sockets: dict[str, int] = {}
    cores: dict[str, int] = {}
    phys = core = "0"
    flags: list[str] = []
    for line in text.splitlines():
        key, _, val = (part.strip() for part in line.partition(":"))
        if key == "flags":
            flags = val.split()
        if key in ("model name", "Processor", "vendor_id", "cpu", "Vendor", "processor"):
            processor.append(val)
            vendors += key == "vendor_id"
            models += key == "model name"
            processors += key == "processor"
        elif key == "physical id":
            phys = val
            sockets.setdefault(phys, 1)
        elif key == "core id":
            core = val
            if core not in sockets:
                cores[core] = 1
        elif key == "cpu cores":
            sockets[phys] = int(val)
        elif key == "siblings":
            cores[core] = int(val)
    count_lines = vendors if vendors and vendors == models else len(processor)
    if architecture.startswith(("armv", "aarch", "ppc")):
        count_lines = processors
    count = len(sockets) or count_lines
    per_socket = next(iter(sockets.values()), 0) or 1
    threads = round(next(iter(cores.values())) / per_socket) if cores else round(1 / per_socket)
    out = {"processor": processor, "processor_count": count, "processor_cores": per_socket,
           "processor_threads_per_core": threads, "processor_vcpus": threads * count * per_socket}
    if flags:
        out["flags"] = flags
    return out


def parse_meminfo(text: str) -> dict:
    """memtotal_mb, memfree_mb, swaptotal_mb, swapfree_mb and memory_mb from /proc/meminfo (kB to MiB)."""
    mb: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            mb[key.lower()] = int(parts[0]) // 1024
    out: dict = {f"{k}_mb": mb[k] for k in ("memtotal", "swaptotal", "memfree", "swapfree") if k in mb}
    total, free = mb.get("memtotal"), mb.get("memfree")
    swap_total, swap_free = mb.get("swaptotal"), mb.get("swapfree")
    cached, buffers = mb.get("cached"), mb.get("buffers")
    nocache_free = None if cached is None or free is None or buffers is None else cached + free + buffers
    out["memory_mb"] = {
        "real": {"total": total, "used": _minus(total, free), "free": free},
        "nocache": {"free": nocache_free, "used": _minus(total, nocache_free)},
        "swap": {"total": swap_total, "free": swap_free, "used": _minus(swap_total, swap_free),
                 "cached": mb.get("swapcached")},
    }
    return out


def _minus(a: int | None, b: int | None) -> int | None:
    """a - b, or None when either is unknown (as Ansible leaves a figure /proc/meminfo lacks)."""
    return None if a is None or b is None else a - b


def hardware_facts(architecture: str) -> dict:
    out: dict = {}
    if platform.system() != "Linux":
        return out
    cpuinfo = _read("/proc/cpuinfo")
    if cpuinfo is not None:
        out.update(parse_cpuinfo(cpuinfo, architecture))
        try:
            out["processor_nproc"] = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            out["processor_nproc"] = out.get("processor_vcpus", 1)
    meminfo = _read("/proc/meminfo")
    if meminfo is not None:
        out.update(parse_meminfo(meminfo))
    uptime = _read("/proc/uptime")
    if uptime:
        out["uptime_seconds"] = int(float(uptime.split()[0]))
    return out


# -- network -----------------------------------------------------------------------------------------------------
def _ifreq(sock: socket.socket, request: int, name: str) -> str | None:
    """An IPv4 address the kernel keeps for an interface (SIOCGIF* ioctl), or None."""
    try:
        raw = fcntl.ioctl(sock.fileno(), request, struct.pack("256s", name[:15].encode()))
    except OSError:
        return None
    return socket.inet_ntoa(raw[20:24])


def interface_facts(name: str) -> dict:
    """What /sys tells of one interface: its device, mac, mtu, whether up, type (as Ansible's interface facts)."""
    base = f"/sys/class/net/{name}"
    out: dict = {"device": name}
    mac = _read(f"{base}/address")
    if mac and mac != "00:00:00:00:00:00":
        out["macaddress"] = mac
    mtu = _read(f"{base}/mtu")
    if mtu and mtu.isdigit():
        out["mtu"] = int(mtu)
    state = _read(f"{base}/operstate")
    if state is not None:
        out["active"] = state != "down"
    kind = _read(f"{base}/type")
    if kind is not None:
        out["type"] = INTERFACE_TYPES.get(kind, "unknown")
    if os.path.exists(f"{base}/bridge"):
        out["type"] = "bridge"
    if os.path.exists(f"{base}/bonding"):
        out["type"] = "bonding"
    return out


def default_route(text: str) -> tuple[str, str] | None:
    """(interface, gateway) of the IPv4 default route in /proc/net/route's text, or None."""
    for line in text.splitlines()[1:]:
        cols = line.split()
        if len(cols) >= 8 and cols[1] == "00000000" and cols[7] == "00000000" and int(cols[3], 16) & 1:
            return cols[0], socket.inet_ntoa(struct.pack("<I", int(cols[2], 16)))
    return None


def default_ipv4_facts() -> dict:
    """ansible_default_ipv4 (best effort: the default route's interface and its primary address, where Ansible
    asks `ip route get 8.8.8.8`)."""
    route = default_route(_read("/proc/net/route") or "")
    if route is None:
        return {}
    name, gateway = route
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        address = _ifreq(sock, 0x8915, name)  # SIOCGIFADDR
        netmask = _ifreq(sock, 0x891B, name)  # SIOCGIFNETMASK
        broadcast = _ifreq(sock, 0x8919, name)  # SIOCGIFBRDADDR
    if address is None or netmask is None:
        return {}
    mask = struct.unpack("!I", socket.inet_aton(netmask))[0]
    network = socket.inet_ntoa(struct.pack("!I", struct.unpack("!I", socket.inet_aton(address))[0] & mask))
    info = interface_facts(name)
    out = {"address": address, "alias": name, "broadcast": broadcast or "", "gateway": gateway, "interface": name,
           "netmask": netmask, "network": network, "prefix": str(bin(mask).count("1")),
           "type": info.get("type", "unknown")}
    out.update({k: info[k] for k in ("macaddress", "mtu") if k in info})
    return out


def network_facts() -> dict:
    try:
        names = os.listdir("/sys/class/net")
    except OSError:
        names = []
    return {"interfaces": names, "default_ipv4": default_ipv4_facts()}


# -- all of it ---------------------------------------------------------------------------------------------------
def gather(gather_subset: list[str] | None = None, filters: list[str] | None = None) -> dict:
    """The facts setup returns under `ansible_facts`: each name with its `ansible_` prefix, `gather_subset` as
    asked and `module_setup` (`filters` choose among all of them); raises BadSubset for a subset name Ansible does not know."""
    asked = list(gather_subset or ["all"])
    subsets = chosen_subsets(asked)
    facts = minimal_facts(subsets)
    if "hardware" in subsets:
        facts.update(hardware_facts(facts.get("architecture") or platform.machine()))
    if "network" in subsets or "interfaces" in subsets:
        facts.update(network_facts())
    if "chroot" in subsets:
        facts["is_chroot"] = _is_chroot()
    if "loadavg" in subsets:
        try:
            one, five, fifteen = os.getloadavg()
            facts["loadavg"] = {"1m": one, "5m": five, "15m": fifteen}
        except OSError:
            pass
    prefixed = {**{f"ansible_{k}": v for k, v in facts.items()}, "gather_subset": asked, "module_setup": True}
    return filtered(prefixed, list(filters or []))


def _is_chroot() -> bool:
    """Whether / is not the root of PID 1 (as Ansible's chroot fact; unknown reads as False)."""
    try:
        mine, init = os.stat("/"), os.stat("/proc/1/root/.")
    except OSError:
        return False
    return (mine.st_ino, mine.st_dev) != (init.st_ino, init.st_dev)
