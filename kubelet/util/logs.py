"""The kubelet's log output, as component-base/logs sets up klog.

- Verbosity: klog's V(n) levels on Python's numeric levels. V(0) is INFO (and
  warnings and errors always show); V(1)-V(3) sit just under INFO; V(4) is
  logging.DEBUG, so the code's log.debug lines are upstream's V(4) ones; V(5)
  and up sit under DEBUG. `-v=N` (or logging.verbosity) shows V(0)..V(N).
- "text": klog's header, `Lmmdd hh:mm:ss.uuuuuu pid file.py:line] msg`, then
  any structured values as ` key="value"`.
- "json": component-base's JSON shape, one object a line: "ts" (milliseconds
  since the epoch, a float, as its zap encoder writes), "caller" (dir/file:line),
  "msg", the structured values, then "v" (the verbosity) for info lines or
  "err" for error lines that carry an exception.

Structured values come from `extra=` on a logging call:
`log.info("Pod started", extra={"pod": "default/web"})`.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

import orjson

FORMATS = ("text", "json")

# The attributes every LogRecord has; anything else came from `extra=`.
_RECORD_ATTRS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "taskName",
}


# Libraries whose debug output stays out of the log below V(10).
LIBRARY_LOGGERS = ("grpc",)


def level_for(v: int) -> int:
    """The Python level of klog's V(v)."""
    if v <= 0:
        return logging.INFO
    if v <= 3:
        return logging.INFO - v
    return max(1, logging.DEBUG - (v - 4))


def verbosity_of(levelno: int) -> int:
    """klog's V(n) for a Python level (the smallest n whose level admits it)."""
    if levelno >= logging.INFO:
        return 0
    if levelno >= logging.INFO - 3:
        return logging.INFO - levelno
    if levelno >= logging.DEBUG:
        return 4
    return 4 + logging.DEBUG - levelno


def _caller(record: logging.LogRecord) -> str:
    # zap's short caller: the last directory and the file.
    parent = os.path.basename(os.path.dirname(record.pathname))
    return (
        f"{parent}/{record.filename}:{record.lineno}"
        if parent
        else f"{record.filename}:{record.lineno}"
    )


def _values(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in vars(record).items() if k not in _RECORD_ATTRS}


class JSONFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": record.created * 1000.0,
            "caller": _caller(record),
            "msg": record.getMessage(),
        }
        for k, v in _values(record).items():
            doc.setdefault(k, v)
        if record.levelno >= logging.ERROR:
            if record.exc_info and record.exc_info[1] is not None:
                doc["err"] = str(record.exc_info[1]) or type(record.exc_info[1]).__name__
                doc["stacktrace"] = self.formatException(record.exc_info)
        else:
            doc["v"] = verbosity_of(record.levelno)
            if record.exc_info:
                doc["stacktrace"] = self.formatException(record.exc_info)
        return orjson.dumps(doc, default=str).decode()


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        t = time.gmtime(record.created)
        us = int((record.created % 1) * 1e6)
        level = "IWEF"[min(3, max(0, (record.levelno - 10) // 10 - 1))]
        if record.levelno >= logging.CRITICAL:
            level = "F"
        head = (
            f"{level}{t.tm_mon:02d}{t.tm_mday:02d} {t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d}"
            f".{us:06d} {record.process} {record.filename}:{record.lineno}] "
        )
        out = head + record.getMessage()
        for k, v in _values(record).items():
            out += f" {k}={orjson.dumps(v, default=str).decode()}"
        if record.exc_info:
            out += "\n" + self.formatException(record.exc_info)
        return out


def setup(
    fmt: str,
    verbosity: int,
    vmodule: Sequence[object] | None = None,
    options: Mapping[str, object] | None = None,
    stream: TextIO | None = None,
) -> list[str]:
    """Install the root handler; returns warnings for settings not implemented."""
    if fmt not in FORMATS:
        raise ValueError(f"unsupported log format {fmt!r}, want one of {', '.join(FORMATS)}")
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JSONFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level_for(verbosity))
    # gRPC's own debug lines (one per call at V(4)) are the library's, not
    # the kubelet's; the Go kubelet keeps grpc-go's logger quiet too.
    for name in LIBRARY_LOGGERS:
        logging.getLogger(name).setLevel(logging.INFO if verbosity < 10 else logging.NOTSET)
    warnings = []
    if vmodule:
        warnings.append("logging.vmodule: not implemented by this kubelet, ignored")
    for k in _set_options(options or {}, "logging.options"):
        warnings.append(f"{k}: not implemented by this kubelet, ignored")
    return warnings


def _set_options(options: Mapping[str, object], prefix: str) -> list[str]:
    """The option leaves set away from their defaults (false, zero bytes):
    the defaults every flag set fills in change nothing, so they are not
    reported as ignored."""
    out = []
    for k, v in options.items():
        name = f"{prefix}.{k}"
        if isinstance(v, Mapping):
            out += _set_options(v, name)
        elif v not in (None, False, 0, "", "0"):
            out.append(name)
    return out
