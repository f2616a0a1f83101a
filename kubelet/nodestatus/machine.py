"""Facts about this machine for Node.status.capacity and nodeInfo (cadvisor's MachineInfo)."""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass, field

_GOARCH = {
    "x86_64": "amd64",
    "aarch64": "arm64",
    "armv7l": "arm",
    "ppc64le": "ppc64le",
    "s390x": "s390x",
}


def _read(path: str) -> str:
    try:
        with open(path) as fh:
            return fh.read().strip()
    except OSError:
        return ""


@dataclass
class MachineInfo:
    num_cores: int
    memory_capacity: int  # bytes
    machine_id: str
    system_uuid: str
    boot_id: str
    kernel_version: str
    os_image: str
    architecture: str
    hugepages: dict[str, int] = field(default_factory=dict)  # "hugepages-2Mi" -> bytes
    swap_capacity: int = 0  # bytes: /proc/meminfo SwapTotal, as cAdvisor's SwapCapacity


def machine_info(proc: str = "/proc", sys: str = "/sys") -> MachineInfo:
    mem_total = swap_total = 0
    for line in _read(f"{proc}/meminfo").splitlines():
        if line.startswith("MemTotal:"):
            mem_total = int(line.split()[1]) * 1024
        elif line.startswith("SwapTotal:"):
            swap_total = int(line.split()[1]) * 1024
    os_image = "Linux"
    for line in _read("/etc/os-release").splitlines():
        if line.startswith("PRETTY_NAME="):
            os_image = line.split("=", 1)[1].strip().strip('"')
    hugepages: dict[str, int] = {}
    hp_dir = f"{sys}/kernel/mm/hugepages"
    try:
        for entry in os.listdir(hp_dir):
            # hugepages-2048kB -> hugepages-2Mi; capacity = pages * size
            size_kb = int(entry.split("-")[1].removesuffix("kB"))
            pages = int(_read(f"{hp_dir}/{entry}/nr_hugepages") or 0)
            name = (
                f"hugepages-{size_kb // 1024}Mi"
                if size_kb < 1048576
                else f"hugepages-{size_kb // 1048576}Gi"
            )
            hugepages[name] = pages * size_kb * 1024
    except (OSError, ValueError):
        pass
    return MachineInfo(
        num_cores=os.cpu_count() or 1,
        memory_capacity=mem_total,
        swap_capacity=swap_total,
        machine_id=_read("/etc/machine-id") or _read("/var/lib/dbus/machine-id"),
        system_uuid=_read(f"{sys}/class/dmi/id/product_uuid").lower(),
        boot_id=_read(f"{proc}/sys/kernel/random/boot_id"),
        kernel_version=platform.release(),
        os_image=os_image,
        architecture=_GOARCH.get(platform.machine(), platform.machine()),
        hugepages=hugepages,
    )
