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
from pathlib import Path

import grpc

from kubelet.apis.podresources.v1 import api_pb2 as pr
from kubelet.apis.podresources.v1 import api_pb2_grpc as pr_grpc
from kubelet.cm.devicemanager.manager import DeviceManager
from kubelet.testing.controlplane import cache_bin
from kubelet.testing.kubelets import in_process_kubelet
from kubelet.testing.parts import part_unavailable, require_binary, tail_of
from kubelet.testing.process import remove_log_links_into
from kubelet.testing.wait import WaitTimeout, wait_for_async
from tests.unit.cm.fixtures import gpu_pod

R = "example.com/resource"
BIND = 'mount --bind "$0" /var/lib/kubelet && exec "$1"'


def plugin_and_unshare() -> tuple[str, str]:
    binary = require_binary(
        "sample-device-plugin",
        os.path.join(cache_bin(), "sample-device-plugin"),
        "run hack/build-control-plane.sh sample-device-plugin",
    )
    unshare = shutil.which("unshare")
    if unshare is None:
        part_unavailable("sample-device-plugin", "unshare (util-linux) is not installed")
    return binary, unshare


async def test_sample_device_plugin_registers_lists_and_allocates() -> None:
    binary, unshare = plugin_and_unshare()
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
            await wait_for_async(
                "mgr.capacity().capacity.get(R) == 2",
                lambda: mgr.capacity().capacity.get(R) == 2,
                60,
                every=0.01,
                retry_on=(),
            )
        except WaitTimeout:
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
        await wait_for_async(
            "mgr.capacity().allocatable.get(R) == 0",
            lambda: mgr.capacity().allocatable.get(R) == 0,
            20,
            every=0.01,
            retry_on=(),
        )
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


async def test_sample_device_plugin_devices_in_pod_resources(simruntime) -> None:  # type: ignore[no-untyped-def]
    """A running kubelet (simulated runtime) with the sample plugin registered:
    a pod given one of its devices shows it in List on the pod-resources
    socket, and GetAllocatableResources has both (no topology: the sample
    plugin reports none)."""
    binary, unshare = plugin_and_unshare()
    # A short directory: the plugin's socket path, seen from the kubelet, is a Unix socket path.
    work = Path(tempfile.mkdtemp(prefix="dpr", dir="/tmp"))
    log_path = work / "plugin.log"
    os.makedirs("/var/lib/kubelet", exist_ok=True)
    proc = None
    try:
        async with in_process_kubelet(simruntime.endpoint, work) as node:
            devices = node.kubelet.resource_managers.devices
            await wait_for_async(
                '(work / "root/device-plugins/kubelet.sock").exists()',
                lambda: (work / "root/device-plugins/kubelet.sock").exists(),
                60,
                every=0.01,
                retry_on=(),
            )
            with open(log_path, "wb") as log:
                proc = await asyncio.create_subprocess_exec(
                    unshare, "--mount", "--propagation", "private", "sh", "-c", BIND,
                    str(work / "root"), binary, stdout=log, stderr=log,
                )  # fmt: skip
            try:
                await wait_for_async(
                    "devices.capacity().allocatable.get(R) == 2",
                    lambda: devices.capacity().allocatable.get(R) == 2,
                    60,
                    every=0.01,
                    retry_on=(),
                )
            except WaitTimeout:
                part_unavailable("sample-device-plugin", "never registered", tail_of(str(log_path)))
            node.write("dev", [{"name": "c", "image": "busybox",
                                "resources": {"limits": {R: "1"}}}])  # fmt: skip
            await node.wait(lambda: node.phase("dev") == "Running", 60, "dev Running")
            sock = work / "root" / "pod-resources" / "kubelet.sock"
            async with grpc.aio.insecure_channel(f"unix://{sock}") as ch:
                api = pr_grpc.PodResourcesListerStub(ch)
                listed = await api.List(pr.ListPodResourcesRequest())
                alloc = await api.GetAllocatableResources(pr.AllocatableResourcesRequest())
            [pod] = [p for p in listed.pod_resources if p.name == "dev-node-a"]
            [c] = pod.containers
            [held] = c.devices
            assert held.resource_name == R and list(held.device_ids) in (["Dev-1"], ["Dev-2"])
            assert not held.HasField("topology")
            assert sorted((d.resource_name, *d.device_ids) for d in alloc.devices) == [
                (R, "Dev-1"), (R, "Dev-2"),
            ]  # fmt: skip
    finally:
        if proc is not None and proc.returncode is None:
            proc.kill()
            await proc.wait()
        shutil.rmtree(work, ignore_errors=True)
        remove_log_links_into(work)  # outside the session's tmp dirs the sweep covers
        for dev in ("/tmp/Dev-1", "/tmp/Dev-2"):  # the plugin's fake device files
            if os.path.isfile(dev):
                os.unlink(dev)
