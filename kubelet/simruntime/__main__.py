"""kubelet-simruntime --listen unix:///PATH: run the simulated CRI runtime."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys

from kubelet.simruntime.state import Options


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="kubelet-simruntime", description=__doc__)
    ap.add_argument("--listen", required=True, help="unix:///path/to/socket")
    ap.add_argument("--pod-cidr", default="10.88.0.0/16", help="sandbox IPs come from here")
    ap.add_argument("--pull-delay", type=float, default=0.0, help="seconds each pull takes")
    ap.add_argument(
        "--missing-tag",
        action="append",
        default=None,
        help="image tags that fail to pull as a registry miss (default: missing)",
    )
    ap.add_argument(
        "--cgroup-driver",
        choices=("cgroupfs", "systemd", "none"),
        default="cgroupfs",
        help="what RuntimeConfig reports (none: UNIMPLEMENTED, as containerd 1.6)",
    )
    ap.add_argument(
        "--checkpoint",
        choices=("archive", "unimplemented"),
        default="archive",
        help="CheckpointContainer: write an archive, or answer UNIMPLEMENTED (containerd 1.6)",
    )
    ap.add_argument(
        "--sandbox-resources",
        choices=("keep", "unimplemented"),
        default="keep",
        help="UpdatePodSandboxResources: keep the values, or answer UNIMPLEMENTED (containerd 1.6)",
    )
    ap.add_argument(
        "--supplemental-groups-policy",
        choices=("supported", "unsupported"),
        default="supported",
        help="what Status reports of SupplementalGroupsPolicy (unsupported: as containerd 1.6)",
    )
    ap.add_argument("-v", "--verbose", action="store_true")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if not args.listen.startswith("unix://"):
        print("kubelet-simruntime: --listen must be unix:///path", file=sys.stderr)
        return 1
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s simruntime: %(message)s",
    )
    opts = Options(
        pod_cidr=args.pod_cidr,
        pull_delay=args.pull_delay,
        missing_tags=tuple(args.missing_tag or ["missing"]),
        cgroup_driver="" if args.cgroup_driver == "none" else args.cgroup_driver,
        checkpoint=args.checkpoint == "archive",
        sandbox_resources=args.sandbox_resources == "keep",
        supplemental_groups_policy=args.supplemental_groups_policy == "supported",
        # The socket's directory exists and lies on a real filesystem.
        image_fs=os.path.dirname(os.path.abspath(args.listen.removeprefix("unix://"))),
    )

    async def run() -> None:
        from kubelet.simruntime.server import serve

        server, _ = await serve(args.listen, opts)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        await server.stop(1)

    import uvloop

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
