"""Does our kubelet's /metrics serve what the upstream kubelet's does, by the same
names, types, label names and buckets? The gaps must be the ones docs/metrics.md
lists as not served.

    python -m benches.metric_parity OURS UPSTREAM      # files or http(s) URLs of /metrics
    python -m benches.metric_parity --dump UPSTREAM    # the families as JSON (a fixture)

A family is keyed by its exposition name (counters with `_total`). Buckets match
when every bound of upstream's is one of ours (ours may be finer). Label names
are compared where a family has samples (client_golang leaves out a labelled
family nobody has touched; prometheus_client writes its HELP and TYPE alone).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

DOC = Path(__file__).resolve().parent.parent / "docs" / "metrics.md"
# Rows of docs/metrics.md's table of what is not served: | `name` | why |
_ROW = re.compile(r"^\|\s*`([a-zA-Z_:][a-zA-Z0-9_:]*)`\s*\|")
_NOT_SERVED_HEAD = "## Not served"
# The Go runtime's own families: this kubelet is not a Go program.
SKIP_PREFIXES = ("go_",)


@dataclass
class Family:
    type: str
    labels: list[str] | None  # None: no samples to read them from
    buckets: list[float] = field(default_factory=list)


def exposition_name(name: str, typ: str) -> str:
    return name + "_total" if typ == "counter" else name


def families(text: str) -> dict[str, Family]:
    out: dict[str, Family] = {}
    for fam in text_string_to_metric_families(text):
        labels: set[str] = set()
        bounds: set[float] = set()
        for s in fam.samples:
            if s.name.endswith("_created"):
                continue
            labels |= {k for k in s.labels if k not in ("le", "quantile")}
            if s.name.endswith("_bucket") and "le" in s.labels and s.labels["le"] != "+Inf":
                bounds.add(float(s.labels["le"]))
        real = [s for s in fam.samples if not s.name.endswith("_created")]
        out[exposition_name(fam.name, fam.type)] = Family(
            fam.type, sorted(labels) if real else None, sorted(bounds)
        )
    return out


def not_served(doc: Path = DOC) -> dict[str, str]:
    """The names docs/metrics.md lists under "Not served", with why."""
    out: dict[str, str] = {}
    section = False
    for line in doc.read_text().splitlines():
        if line.startswith("## "):
            section = line.startswith(_NOT_SERVED_HEAD)
            continue
        m = _ROW.match(line)
        if section and m:
            out[m.group(1)] = line.split("|")[2].strip()
    return out


@dataclass
class Report:
    served: list[str] = field(default_factory=list)  # by both, matching
    missing: list[str] = field(default_factory=list)  # upstream's, not ours, not listed
    listed_not_served: list[str] = field(default_factory=list)  # upstream's, listed
    listed_but_served: list[str] = field(default_factory=list)  # listed, yet we serve it
    type_differs: dict[str, list[str]] = field(default_factory=dict)
    labels_differ: dict[str, list[list[str]]] = field(default_factory=dict)
    buckets_missing: dict[str, list[float]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not (self.missing or self.listed_but_served or self.type_differs
                    or self.labels_differ or self.buckets_missing)  # fmt: skip


def compare(ours: dict[str, Family], upstream: dict[str, Family], listed: dict[str, str]) -> Report:
    r = Report()
    for name, up in sorted(upstream.items()):
        if name.startswith(SKIP_PREFIXES):
            continue
        mine = ours.get(name)
        if mine is None:
            (r.listed_not_served if name in listed else r.missing).append(name)
            continue
        if name in listed:
            r.listed_but_served.append(name)
        if mine.type != up.type:
            r.type_differs[name] = [mine.type, up.type]
            continue
        if mine.labels is not None and up.labels is not None and mine.labels != up.labels:
            r.labels_differ[name] = [mine.labels, up.labels]
            continue
        lacking = [b for b in up.buckets if not any(abs(b - m) < 1e-9 for m in mine.buckets)]
        if up.type == "histogram" and mine.buckets and lacking:
            r.buckets_missing[name] = lacking
            continue
        r.served.append(name)
    r.listed_but_served += sorted(n for n in listed if n in ours and n not in upstream)
    return r


def _read(src: str) -> str:
    if src.startswith(("http://", "https://")):
        with urllib.request.urlopen(src, timeout=30) as resp:
            return str(resp.read().decode())
    return Path(src).read_text()


def load_fixture(path: Path) -> dict[str, Family]:
    return {k: Family(**v) for k, v in json.loads(path.read_text())["families"].items()}


def summary(report: Report) -> dict[str, Any]:
    """A short form for result records."""
    return {
        "ok": report.ok,
        "served": len(report.served),
        "not_served_listed": len(report.listed_not_served),
        "missing": report.missing,
        "listed_but_served": report.listed_but_served,
        "type_differs": report.type_differs,
        "labels_differ": report.labels_differ,
        "buckets_missing": report.buckets_missing,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benches.metric_parity")
    ap.add_argument("ours", nargs="?")
    ap.add_argument("upstream", nargs="?")
    ap.add_argument("--dump", metavar="METRICS", help="print a scrape's families as JSON")
    args = ap.parse_args(argv)
    if args.dump:
        fams = {k: asdict(v) for k, v in sorted(families(_read(args.dump)).items())}
        print(json.dumps({"families": fams}, indent=1))
        return 0
    if not (args.ours and args.upstream):
        ap.error("OURS and UPSTREAM are needed")
    upstream = (load_fixture(Path(args.upstream)) if args.upstream.endswith(".json")
                else families(_read(args.upstream)))  # fmt: skip
    report = compare(families(_read(args.ours)), upstream, not_served())
    print(json.dumps(asdict(report) | {"ok": report.ok}, indent=1))
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
