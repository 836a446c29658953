"""facts: the host's OS, python, resources and GPUs; fast, never a change."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dflash_host.host import ansible_facts
from dflash_host.host.gpus import DEFAULT_TIMEOUT_S, parse_cuda_version, parse_gpu_csv
from dflash_host.module import Context, check_args
from library import facts
from tests.fakes.gpu_holder import FakeGpu

ROOT = Path(__file__).resolve().parents[2]
H200 = "0, NVIDIA H200, GPU-5f3c, 9.0, 143771, 0, 580.159.04\n"


@pytest.fixture
def gpu():
    fake = FakeGpu()
    yield fake
    fake.cleanup()


def gather(**args) -> dict:
    return facts.run(check_args(facts.ARGS, args, "facts"), Context())


# ---------------------------------------------------------------- pure parsing


@pytest.mark.parametrize(
    "text, expected",
    [
        (
            H200,
            [
                {
                    "index": 0,
                    "name": "NVIDIA H200",
                    "uuid": "GPU-5f3c",
                    "compute_capability": "9.0",
                    "memory_total_mib": 143771,
                    "memory_used_mib": 0,
                    "driver_version": "580.159.04",
                }
            ],
        ),
        (
            "0, NVIDIA GeForce RTX 3090, GPU-a, 8.6, 24576, 1234, 550.1\n1, NVIDIA B200, GPU-b, 10.0, 183359, [N/A], 550.1",
            [
                {
                    "index": 0,
                    "name": "NVIDIA GeForce RTX 3090",
                    "uuid": "GPU-a",
                    "compute_capability": "8.6",
                    "memory_total_mib": 24576,
                    "memory_used_mib": 1234,
                    "driver_version": "550.1",
                },
                {
                    "index": 1,
                    "name": "NVIDIA B200",
                    "uuid": "GPU-b",
                    "compute_capability": "10.0",
                    "memory_total_mib": 183359,
                    "memory_used_mib": None,
                    "driver_version": "550.1",
                },
            ],
        ),
        (
            "0, Odd, Name, GPU-c, 9.0, 10, 1, 580\n",
            [
                {
                    "index": 0,
                    "name": "Odd, Name",
                    "uuid": "GPU-c",
                    "compute_capability": "9.0",
                    "memory_total_mib": 10,
                    "memory_used_mib": 1,
                    "driver_version": "580",
                }
            ],
        ),
        ("\n", []),
    ],
)
def test_gpu_query_parsing(text, expected):
    assert parse_gpu_csv(text) == expected


def test_gpu_query_parsing_rejects_an_unexpected_format():
    with pytest.raises(ValueError):
        parse_gpu_csv("NVIDIA-SMI has failed\n")


@pytest.mark.parametrize(
    "text, expected",
    [
        ("NVIDIA-SMI version  : 580.159.04\nCUDA Version        : 13.0\n", "13.0"),
        ("| NVIDIA-SMI 535.104.05   Driver Version: 535.104.05   CUDA Version: 12.2     |", "12.2"),
        ("nothing here", None),
        ("", None),
    ],
)
def test_cuda_version_from_version_output_or_table_header(text, expected):
    assert parse_cuda_version(text) == expected


def test_os_release_and_meminfo_parsing():
    rel = ansible_facts.parse_os_release('NAME="Debian GNU/Linux"\nVERSION_ID="12"\nID=debian\n# c\nBAD\n')
    assert rel == {"NAME": "Debian GNU/Linux", "VERSION_ID": "12", "ID": "debian"}
    mem = facts.parse_meminfo("MemTotal:       24684544 kB\nMemFree: 100 kB\nMemAvailable:   24131584 kB\n")
    assert mem == {"total": 24106, "available": 23566}
    assert facts.parse_meminfo("MemTotal: 2048 kB\nMemFree: 1024 kB\nCached: 1024 kB\n") == {"total": 2, "available": 2}


def test_gpu_facts_without_driver_carry_the_reason():
    gpu, gpus = facts.gpu_facts(None, "no nvidia-smi", None)
    assert gpu == {"driver": False, "reason": "no nvidia-smi", "driver_version": None, "cuda_version": None, "count": 0}
    assert gpus == []


# ---------------------------------------------------------------- on this host


def test_facts_without_nvidia_smi_say_there_is_no_driver_and_why(tmp_path):
    res = gather(nvidia_smi=str(tmp_path / "nvidia-smi"))
    assert res["changed"] is False
    f = res["facts"]
    assert f["gpu"]["driver"] is False and "does not exist" in f["gpu"]["reason"] and f["gpus"] == []
    res = gather(nvidia_smi="nvidia-smi-not-installed-here")
    assert "not on PATH" in res["facts"]["gpu"]["reason"]


def test_facts_shape_matches_the_contract(tmp_path):
    f = gather(nvidia_smi=str(tmp_path / "none"), disk_paths=["~", str(tmp_path / "not" / "made")])["facts"]
    assert set(f) == {"hostname", "user", "home", "os", "python", "cpu_count", "memory_mib", "disk", "systemd", "gpu", "gpus"}
    assert {"system", "kernel", "distribution", "machine"} <= set(f["os"])
    assert f["python"]["executable"] == sys.executable
    assert f["cpu_count"] == os.cpu_count()
    assert f["memory_mib"]["total"] > 0 and 0 < f["memory_mib"]["available"] <= f["memory_mib"]["total"]
    assert f["disk"]["~"]["path"] == os.path.expanduser("~") and f["disk"]["~"]["free_mib"] > 0
    missing = f["disk"][str(tmp_path / "not" / "made")]
    assert missing["exists"] is False and missing["free_mib"] > 0  # measured on its nearest parent
    assert isinstance(f["systemd"], bool)
    json.dumps(f)


def test_facts_report_gpus_from_nvidia_smi(gpu):
    f = gather(nvidia_smi=gpu.nvidia_smi)["facts"]
    assert f["gpu"] == {"driver": True, "reason": "", "driver_version": "580.159.04", "cuda_version": "13.0", "count": 1}
    assert f["gpus"] == [
        {
            "index": 0,
            "name": "NVIDIA H200",
            "uuid": "GPU-5f3c2a8e-0000-4000-8000-000000000000",
            "compute_capability": "9.0",
            "memory_total_mib": 143771,
            "memory_used_mib": 0,
        }
    ]


def test_facts_memory_used_counts_live_holders(gpu):
    gpu.configure(gpus=[{"name": "NVIDIA H200"}, {"name": "NVIDIA A100-SXM4-80GB", "compute_cap": "8.0", "total_mib": 81920}])
    gpu.start({"name": "h", "mib": 1500, "gpu": 1})
    f = gather(nvidia_smi=gpu.nvidia_smi)["facts"]
    assert [(g["index"], g["compute_capability"], g["memory_used_mib"]) for g in f["gpus"]] == [(0, "9.0", 0), (1, "8.0", 1500)]


def test_facts_when_the_driver_is_gone(gpu):
    gpu.configure(driver=False)
    f = gather(nvidia_smi=gpu.nvidia_smi)["facts"]
    assert f["gpu"]["driver"] is False
    assert "exited with 9" in f["gpu"]["reason"] and "couldn't communicate" in f["gpu"]["reason"]


def test_facts_on_a_driver_without_compute_cap_field(gpu):
    gpu.configure(extra={"unsupported_fields": ["compute_cap"]})
    f = gather(nvidia_smi=gpu.nvidia_smi)["facts"]
    assert f["gpu"]["driver"] is True and f["gpus"][0]["compute_capability"] is None


def test_facts_without_a_gpu_do_not_wait_on_the_nvidia_smi_timeout(tmp_path):
    # A missing nvidia-smi is known at once; only a hung one may cost the timeout (speed is `invoke bench`'s).
    args = check_args(facts.ARGS, {"nvidia_smi": str(tmp_path / "none")}, "facts")
    t0 = time.monotonic()
    res = facts.run(args, Context())
    assert time.monotonic() - t0 < DEFAULT_TIMEOUT_S / 4
    assert res["facts"]["gpu"]["driver"] is False


def test_facts_run_by_hand_print_json(tmp_path):
    path = tmp_path / "args.json"
    path.write_text(json.dumps({"nvidia_smi": str(tmp_path / "none")}))
    out = subprocess.run([sys.executable, "-m", "library.facts", str(path)], cwd=ROOT, stdout=subprocess.PIPE, check=True)
    res = json.loads(out.stdout)
    assert res["changed"] is False and res["failed"] is False and res["facts"]["gpu"]["driver"] is False
