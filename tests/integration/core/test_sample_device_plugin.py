"""The device manager with the real sample device plugin of the pinned module
(test/images/sample-device-plugin, built by hack/build-control-plane.sh): it
registers on kubelet.sock, lists its two devices, is asked Allocate and its
answer (a mount of a file it creates) is what the container would get.

The plugin knows only /var/lib/kubelet/device-plugins, so it runs in a mount
namespace of its own where the test's root dir is bound there; the machine's
/var/lib/kubelet is not touched beyond making sure the directory exists."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import tempfile

from kubelet.cm.devicemanager.manager import DeviceManager
from kubelet.testing.controlplane import cache_bin
from kubelet.testing.parts import part_unavailable, require_binary, tail_of
from tests.unit.cm.test_device_manager import gpu_pod, until

R = "example.com/resource"
BIND = 'mount --bind "$0" /var/lib/kubelet && exec "$1"'


async def test_sample_device_plugin_registers_lists_and_allocates() -> None:
    binary = require_binary(
        "sample-device-plugin",
        os.path.join(cache_bin(), "sample-device-plugin"),
        "run hack/build-control-plane.sh sample-device-plugin",
    )
    unshare = shutil.which("unshare")
    if unshare is None:
        part_unavailable("sample-device-plugin", "unshare (util-linux) is not installed")
    root = tempfile.mkdtemp(prefix="dpi", dir="/tmp")
    log_path = os.path.join(root, "plugin.log")
    os.makedirs("/var/lib/kubelet", exist_ok=True)
    mgr = DeviceManager(root)
    await mgr.start()
    with open(log_path, "wb") as log:
        proc = await asyncio.create_subprocess_exec(
            unshare, "--mount", "--propagation", "private", "sh", "-c", BIND, root, binary,
            stdout=log, stderr=log,
        )  # fmt: skip
    try:
        try:
            await until(lambda: mgr.capacity().capacity.get(R) == 2, timeout=60)
        except TimeoutError:
            part_unavailable("sample-device-plugin", "never registered", tail_of(log_path))
        assert mgr.capacity().allocatable[R] == 2
        pod = gpu_pod("p", 0)
        pod["spec"]["containers"][0]["resources"]["limits"] = {R: "1"}
        assert mgr.admit(pod) is None
        opts = await mgr.container_options(pod, pod["spec"]["containers"][0])
        assert [(m.container_path, m.host_path) for m in opts.mounts] == [
            ("/tmp/Dev-1", "/tmp/Dev-1")
        ]
        assert os.path.exists("/tmp/Dev-1")  # made by the plugin's Allocate
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), 30)
        await until(lambda: mgr.capacity().allocatable.get(R) == 0)
        assert mgr.capacity().capacity[R] == 2  # until the grace period ends
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await mgr.stop()
        shutil.rmtree(root, ignore_errors=True)
        for dev in ("/tmp/Dev-1", "/tmp/Dev-2"):  # the plugin's fake device files
            if os.path.isfile(dev):
                os.unlink(dev)
