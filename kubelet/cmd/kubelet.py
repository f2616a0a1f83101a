"""The `kubelet` command (cmd/kubelet/app/server.go): flags and config file to a
KubeletServer, validation, Dependencies, then run().
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping, Sequence

import kubelet
from kubelet.cmd.configuration import load
from kubelet.cmd.options import (
    KubeletFlags,
    KubeletServer,
    apply_instance_flags,
    parse_args,
    usage,
)
from kubelet.version import KUBERNETES_VERSION

log = logging.getLogger("kubelet")


class UsageError(Exception):
    def __init__(self, problems: list[str], show_usage: bool = False) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems
        self.show_usage = show_usage


def build_server(argv: Sequence[str]) -> tuple[KubeletServer | None, list[str], int | None]:
    """Parse argv into a KubeletServer.

    Returns (server, warnings, exit_code); exit_code is set when the command
    should stop here (help, version). Raises UsageError listing every problem.
    """
    parsed = parse_args(list(argv))
    flags = KubeletFlags()
    apply_instance_flags(parsed, flags)
    if flags.show_help:
        sys.stdout.write(usage())
        return None, [], 0
    if flags.show_version and flags.show_version != "false":
        if flags.show_version == "raw":
            print(f"{KUBERNETES_VERSION} (kubelet-py {kubelet.__version__})")
        else:
            print(f"Kubernetes {KUBERNETES_VERSION} (kubelet-py {kubelet.__version__})")
        return None, [], 0
    if parsed.positional:
        raise UsageError(
            [f'unknown command "{parsed.positional[0]}" for "kubelet"'], show_usage=True
        )
    # Keep going after bad flags so one run reports every problem.
    loaded = load(parsed, flags)
    problems = parsed.problems + loaded.problems + validate_flags(flags)
    if problems:
        raise UsageError(problems, show_usage=bool(parsed.problems))
    return KubeletServer(flags, loaded.config, loaded.document), loaded.warnings, None


def validate_flags(f: KubeletFlags) -> list[str]:
    import ipaddress

    errs: list[str] = []
    for ip in filter(None, (s.strip() for s in f.node_ip.split(","))):
        try:
            ipaddress.ip_address(ip)
        except ValueError:
            errs.append(f"invalid flag: --node-ip ({ip!r}): must be a valid IP address")
    if f.exit_on_lock_contention and not f.lock_file_path:
        errs.append("invalid flag: --exit-on-lock-contention requires --lock-file")
    for key in f.node_labels:
        if key.startswith(("kubernetes.io/", "k8s.io/")) and not _allowed_node_label(key):
            errs.append(
                f"invalid flag: --node-labels ({key!r}): unknown 'kubernetes.io' or 'k8s.io' "
                "labels specified with --node-labels"
            )
    if not f.root_directory:
        errs.append("invalid flag: --root-dir must not be empty")
    return errs


_ALLOWED_KUBERNETES_LABELS = {
    "kubernetes.io/hostname",
    "kubernetes.io/instance-type",
    "kubernetes.io/os",
    "kubernetes.io/arch",
    "beta.kubernetes.io/instance-type",
    "beta.kubernetes.io/os",
    "beta.kubernetes.io/arch",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "node.kubernetes.io/instance-type",
}


def _allowed_node_label(key: str) -> bool:
    # Mirrors the NodeRestriction allow-list: well-known labels and the
    # kubelet.kubernetes.io / node.kubernetes.io namespaces.
    if key in _ALLOWED_KUBERNETES_LABELS:
        return True
    prefix = key.split("/", 1)[0]
    return prefix.endswith(("kubelet.kubernetes.io", "node.kubernetes.io"))


def setup_logging(
    fmt: str,
    verbosity: int,
    vmodule: Sequence[object] | None = None,
    options: Mapping[str, object] | None = None,
) -> list[str]:
    """The log format and verbosity (kubelet/util/logs.py); warnings for what is ignored."""
    from kubelet.util import logs

    return logs.setup(fmt, verbosity, vmodule, options)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        server, warnings, code = build_server(args)
    except UsageError as err:
        for p in err.problems:
            print(f"Error: {p}", file=sys.stderr)
        if err.show_usage:
            print("Run 'kubelet --help' for usage.", file=sys.stderr)
        return 1
    if code is not None:
        return code
    assert server is not None
    lc = server.config.logging
    warnings += setup_logging(lc.format, lc.verbosity, lc.vmodule, lc.options)
    for w in warnings:
        log.warning("%s", w)
    from kubelet.cmd.run import run_command

    return run_command(server)


if __name__ == "__main__":
    sys.exit(main())
