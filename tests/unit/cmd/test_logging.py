"""Log format and verbosity: component-base's JSON shape, klog's text header and V levels."""

from __future__ import annotations

import io
import json
import logging
import re
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from kubelet.util import logs


@pytest.fixture
def restore_root() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def test_levels_map_klog_verbosity_both_ways() -> None:
    assert logs.level_for(0) == logging.INFO
    assert logs.level_for(4) == logging.DEBUG  # log.debug is upstream's V(4)
    levels = [logs.level_for(v) for v in range(12)]
    assert levels == sorted(levels, reverse=True) and len(set(levels)) == 12
    for v in range(12):
        assert logs.verbosity_of(logs.level_for(v)) == v
    assert logs.verbosity_of(logging.WARNING) == logs.verbosity_of(logging.ERROR) == 0


def test_json_lines_carry_component_base_fields(restore_root: None) -> None:
    out = io.StringIO()
    assert logs.setup("json", 4, stream=out) == []
    log = logging.getLogger("kubelet.test")
    before = time.time() * 1000
    log.info("Pod started", extra={"pod": "default/web", "attempt": 2})
    log.debug("a V(4) line")
    log.log(logs.level_for(5), "a V(5) line: not shown at -v=4")
    try:
        raise OSError("disk full")
    except OSError:
        log.exception("Failed to write checkpoint")
    log.warning("%d%% sure", 100)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [d["msg"] for d in lines] == [
        "Pod started",
        "a V(4) line",
        "Failed to write checkpoint",
        "100% sure",
    ]
    info, debug, err, warn = lines
    assert before <= info["ts"] <= time.time() * 1000  # epoch milliseconds, a float
    assert isinstance(info["ts"], float)
    assert re.fullmatch(r"cmd/test_logging\.py:\d+", info["caller"]), info["caller"]
    assert (info["pod"], info["attempt"], info["v"]) == ("default/web", 2, 0)
    assert list(info)[-1] == "v"  # after the key/values, as zapr appends it
    assert debug["v"] == 4
    assert err["err"] == "disk full" and "v" not in err and "OSError" in err["stacktrace"]
    assert warn["v"] == 0


def test_text_lines_have_the_klog_header(restore_root: None) -> None:
    out = io.StringIO()
    logs.setup("text", 0, stream=out)
    log = logging.getLogger("kubelet.test")
    log.info("Pod started", extra={"pod": "default/web"})
    log.debug("hidden at -v=0")
    log.error("broke")
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    assert re.fullmatch(
        r'I\d{4} \d\d:\d\d:\d\d\.\d{6} \d+ test_logging\.py:\d+\] Pod started pod="default/web"',
        lines[0],
    ), lines[0]
    assert lines[1].startswith("E")


def test_unimplemented_settings_are_named(restore_root: None) -> None:
    w = logs.setup("text", 0, vmodule=[{"filePattern": "x", "verbosity": 2}], options={"json": {"infoBufferSize": "1"}}, stream=io.StringIO())  # fmt: skip
    assert w == [
        "logging.vmodule: not implemented by this kubelet, ignored",
        "logging.options.json.infoBufferSize: not implemented by this kubelet, ignored",
    ]


def test_option_defaults_are_not_reported_as_ignored(restore_root: None) -> None:
    defaults = {"text": {"infoBufferSize": "0", "splitStream": False},
                "json": {"infoBufferSize": "0", "splitStream": False}}  # fmt: skip
    assert logs.setup("text", 0, options=defaults, stream=io.StringIO()) == []
    defaults["text"]["splitStream"] = True
    assert logs.setup("text", 0, options=defaults, stream=io.StringIO()) == [
        "logging.options.text.splitStream: not implemented by this kubelet, ignored"
    ]


def test_unknown_format_is_a_validation_error() -> None:
    p = subprocess.run(
        [sys.executable, "-m", "kubelet", "--logging-format=xml", "-v=-1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 1
    assert "logging.format" in p.stderr and "xml" in p.stderr, p.stderr
    # -v is an unsigned level, as upstream's VerbosityLevel flag
    assert '"-v" flag' in p.stderr and "out of range" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr


def test_a_running_kubelet_logs_json(simruntime, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The real command with --logging-format=json -v=4: every line is a JSON object."""
    from kubelet.testing.kubelets import standalone_kubelet

    manifests = tmp_path / "m"
    manifests.mkdir()
    k = standalone_kubelet(
        tmp_path, simruntime.endpoint, manifests, "--logging-format=json", "-v=4"
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and "started on node" not in k.log.read_text():
            assert k.proc.poll() is None, k.log.read_text()
            time.sleep(0.2)
    finally:
        assert k.stop() == 0
    lines = k.log.read_text().splitlines()
    assert len(lines) > 5
    docs = [json.loads(line) for line in lines]
    for d in docs:
        assert isinstance(d["ts"], float) and isinstance(d["msg"], str)
        assert re.fullmatch(r"[\w.-]+/[\w.-]+\.py:\d+", d["caller"]), d
        assert "v" in d or "err" in d or d.get("msg")
    assert any(d["msg"].startswith("Kubelet ") and "started on node" in d["msg"] for d in docs)


def test_grpc_debug_lines_stay_out_of_the_kubelet_log_below_v10(restore_root: None) -> None:
    """At V(4) the kubelet's own debug lines show; gRPC's one-per-call debug
    lines ("Loaded running loop") do not, as grpc-go's stay quiet upstream."""
    out = io.StringIO()
    grpc_log = logging.getLogger("grpc._cython.cygrpc")
    try:
        logs.setup("text", 4, stream=out)
        logging.getLogger("kubelet.test").debug("ours")
        grpc_log.debug("Loaded running loop")
        grpc_log.warning("a real gRPC problem")
        text = out.getvalue()
        assert "ours" in text and "a real gRPC problem" in text
        assert "Loaded running loop" not in text
        logs.setup("text", 10, stream=out)
        grpc_log.debug("now shown")
        assert "now shown" in out.getvalue()
    finally:
        logging.getLogger("grpc").setLevel(logging.NOTSET)
