"""The health DRA drivers report for their devices (cm/dra/healthinfo.go
upstream), kept per driver and device, and checkpointed in the kubelet's DRA
state directory as upstream's `dra_health_state`.

The file is plain JSON as Go's encoding/json writes upstream's
state.DevicesHealthMap, without a checksum (upstream writes none):
  {"<driver>": {"Devices": {"<pool>/<device>": {"PoolName": .., "DeviceName": ..,
   "Health": "Healthy"|"Unhealthy"|"Unknown", "LastUpdated": <RFC 3339 time>}}}}
A file that cannot be read is logged and an empty cache used, as upstream.

A device's health is what its driver last said, for HEALTH_TIMEOUT after it
said it; older (or never said) it is Unknown. The time is the kubelet's time
of receipt: upstream ignores the driver's last_updated_time the same way.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from kubelet.checkpointmanager import CheckpointStore
from kubelet.util.gotime import GO_ZERO_TIME, go_time, parse_go_time

log = logging.getLogger(__name__)

HEALTH_STATE_FILE = "dra_health_state"
HEALTH_TIMEOUT = 30.0  # healthTimeout (not configurable upstream either)
HEALTHY, UNHEALTHY, UNKNOWN = "Healthy", "Unhealthy", "Unknown"
_STATES = (HEALTHY, UNHEALTHY, UNKNOWN)


@dataclass(frozen=True)
class DeviceHealth:
    """state.DeviceHealth: one device of a driver."""

    pool_name: str
    device_name: str
    health: str  # HEALTHY, UNHEALTHY or UNKNOWN
    last_updated: float = 0.0  # seconds since the epoch; 0: Go's zero time

    @property
    def key(self) -> str:
        return f"{self.pool_name}/{self.device_name}"


# driver -> "<pool>/<device>" -> its health
HealthMap = dict[str, dict[str, DeviceHealth]]


def encode(drivers: HealthMap) -> bytes:
    """json.Marshal of the map: keys sorted, fields in declaration order."""
    doc = {
        driver: {
            "Devices": {
                key: {
                    "PoolName": d.pool_name,
                    "DeviceName": d.device_name,
                    "Health": d.health,
                    "LastUpdated": go_time(d.last_updated),
                }
                for key, d in sorted(devices.items())
            }
        }
        for driver, devices in sorted(drivers.items())
    }
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()


def _device(key: str, raw: object) -> DeviceHealth:
    if not isinstance(raw, dict):
        raise ValueError(f"device {key}: not an object")
    pool, name, health = raw.get("PoolName", ""), raw.get("DeviceName", ""), raw.get("Health", "")
    stamp = raw.get("LastUpdated") or GO_ZERO_TIME
    if not all(isinstance(v, str) for v in (pool, name, health, stamp)):
        raise ValueError(f"device {key}: a field is not a string")
    return DeviceHealth(pool, name, health, parse_go_time(stamp))


def decode(data: bytes) -> HealthMap:
    """ValueError for anything that is not a DevicesHealthMap."""
    doc: object = json.loads(data)
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise ValueError("not a JSON object")
    out: HealthMap = {}
    for driver, state in doc.items():
        if state is None:
            state = {}
        if not isinstance(state, dict):
            raise ValueError(f"driver {driver}: not an object")
        devices = state.get("Devices") or {}
        if not isinstance(devices, dict):
            raise ValueError(f"driver {driver}: Devices is not an object")
        out[driver] = {key: _device(key, raw) for key, raw in devices.items()}
    return out


class HealthCache:
    """healthInfoCache. Only the event loop touches it (no lock needed)."""

    def __init__(self, state_dir: str, clock: Callable[[], float] = time.time) -> None:
        # The kubelet's checkpoint store (an atomic write per change); none: in memory.
        self.store = CheckpointStore(state_dir) if state_dir else None
        self.clock = clock
        self.drivers: HealthMap = self._load()

    def _load(self) -> HealthMap:
        if self.store is None:
            return {}
        try:
            blob = self.store.read(HEALTH_STATE_FILE)
            return {} if blob is None else decode(blob)
        except (OSError, ValueError) as err:
            log.error("Failed to load DRA health checkpoint %s, proceeding with an empty "
                      "cache: %s", HEALTH_STATE_FILE, err)  # fmt: skip
            return {}

    def _save(self) -> None:
        """Errors are logged: the health is then lost by a restart, nothing else."""
        if self.store is None:
            return
        try:
            self.store.write(HEALTH_STATE_FILE, encode(self.drivers))
        except OSError as err:
            log.error("Failed to save the DRA health checkpoint %s; a kubelet restart may "
                      "lose the device health information: %s", HEALTH_STATE_FILE, err)  # fmt: skip

    def health(self, driver: str, pool: str, device: str) -> str:
        """getHealthInfo: Unknown unless the driver said otherwise lately."""
        d = self.drivers.get(driver, {}).get(f"{pool}/{device}")
        if d is None or self.clock() - d.last_updated > HEALTH_TIMEOUT:
            return UNKNOWN
        return d.health

    def devices(self, driver: str) -> list[DeviceHealth]:
        return list(self.drivers.get(driver, {}).values())

    def update(self, driver: str, reported: Iterable[DeviceHealth]) -> list[DeviceHealth]:
        """updateHealthInfo: the driver's report, stamped now. Returns the devices
        whose health changed: new ones, ones reported with another health, and
        ones not reported that timed out (they turn Unknown). Saved on a change."""
        now = self.clock()
        devices = self.drivers.setdefault(driver, {})
        changed: list[DeviceHealth] = []
        seen: set[str] = set()
        for d in reported:
            d = replace(d, health=d.health if d.health in _STATES else UNKNOWN, last_updated=now)
            seen.add(d.key)
            old = devices.get(d.key)
            if old is None or old.health != d.health:
                changed.append(d)
            devices[d.key] = d
        for key, old in list(devices.items()):
            if key in seen or old.health == UNKNOWN or now - old.last_updated <= HEALTH_TIMEOUT:
                continue
            devices[key] = replace(old, health=UNKNOWN, last_updated=now)
            changed.append(devices[key])
        if changed:
            self._save()
        return changed

    def clear_driver(self, driver: str) -> list[DeviceHealth]:
        """clearDriver: everything known of the driver goes (and is returned)."""
        gone = list(self.drivers.pop(driver, {}).values())
        self._save()
        return gone
