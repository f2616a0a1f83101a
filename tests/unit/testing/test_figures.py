"""`python -m benches.report --check`: figures in Markdown against their records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benches import figures, records


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    results = tmp_path / "benches" / "results"
    results.mkdir(parents=True)
    (tmp_path / "docs").mkdir()
    monkeypatch.setattr(records, "RESULTS", results)
    monkeypatch.setattr(figures, "REPO", tmp_path)
    started = records.Started(
        "python -m benches.x", "abc1234def", "2026-11-25T19:00:00Z", records.machine()
    )
    rows = [
        {"kubelet": "ours", "n": 1000, "relist_period_s": 0.25, "p99_s": 0.4812},
        {"kubelet": "upstream", "n": 1000, "relist_period_s": 1.0, "p99_s": 31.1},
    ]
    path = records.write(started, "demo", {"rows": rows, "odd key": 3})
    path.rename(results / "demo.json")
    rec = json.loads((results / "demo.json").read_text())
    rec["name"] = "demo"
    (results / "demo.json").write_text(json.dumps(rec))
    return tmp_path


TEMPLATE = """Intro.

<!-- figures d=demo
| p99 | {d.figures.rows[kubelet=ours,n=1000].p99_s | .2f} s | [{d.figures.rows[1].p99_s / d.figures.rows[0].p99_s | .0f}x]({d@link}) |
| key | {d.figures["odd key"]} | {d.commit | .7} {d.date | .10} |
-->
<!-- /figures -->
"""


def test_write_renders_blocks_and_check_then_passes(repo: Path) -> None:
    doc = repo / "docs" / "benchmarks.md"
    doc.write_text(TEMPLATE)
    assert any("differ from their records" in p for p in figures.run(write=False))
    assert figures.run(write=True) == []
    text = doc.read_text()
    assert "| p99 | 0.48 s | [65x](../benches/results/demo.json) |" in text
    assert "| key | 3 | abc1234 2026-11-25 |" in text
    assert figures.run(write=False) == []


def test_a_figure_edited_by_hand_or_a_changed_record_fails(repo: Path) -> None:
    doc = repo / "docs" / "benchmarks.md"
    doc.write_text(TEMPLATE)
    figures.run(write=True)
    doc.write_text(doc.read_text().replace("0.48 s", "0.38 s"))
    assert [p for p in figures.run(write=False) if "differ" in p]
    figures.run(write=True)
    rec = json.loads((records.RESULTS / "demo.json").read_text())
    rec["figures"]["rows"][0]["p99_s"] = 0.9
    (records.RESULTS / "demo.json").write_text(json.dumps(rec))
    assert [p for p in figures.run(write=False) if "differ" in p]


def test_a_missing_record_or_field_fails(repo: Path) -> None:
    doc = repo / "docs" / "benchmarks.md"
    doc.write_text("<!-- figures gone\n{r.figures.x}\n-->\n<!-- /figures -->\n")
    assert any("no record benches/results/gone.json" in p for p in figures.run(write=False))
    doc.write_text("<!-- figures demo\n{r.figures.nope}\n-->\n<!-- /figures -->\n")
    assert any("no .nope" in p for p in figures.run(write=False))
    doc.write_text("<!-- figures demo\n{r.figures.rows[n=1000].p99_s}\n-->\n<!-- /figures -->\n")
    assert any("matches 2 elements" in p for p in figures.run(write=False))


def test_a_measurement_outside_a_block_fails_unless_a_listed_setting(repo: Path) -> None:
    doc = repo / "docs" / "benchmarks.md"
    doc.write_text("Relist at 250 ms; startup p99 was 0.48 s.\n`took 3 s` in code is fine.\n")
    problems = figures.run(write=False)
    assert any("'250 ms'" in p for p in problems)
    assert any("'0.48 s'" in p for p in problems)
    assert not any("'3 s'" in p for p in problems)
    doc.write_text("<!-- settings: 250 ms -->\nRelist at 250 ms.\n")
    assert figures.run(write=False) == []


def test_a_record_without_its_machine_or_commit_fails(repo: Path) -> None:
    rec = json.loads((records.RESULTS / "demo.json").read_text())
    del rec["commit"]
    rec["machine"]["kernel"] = None
    (records.RESULTS / "demo.json").write_text(json.dumps(rec))
    problems = figures.run(write=False)
    assert "demo: no commit" in problems
    assert any("machine lacks kernel and no note says why" in p for p in problems)


def test_each_renders_a_row_per_element(repo: Path) -> None:
    doc = repo / "docs" / "benchmarks.md"
    doc.write_text(
        "<!-- figures d=demo\n"
        "| kubelet | p99 |\n"
        "{each row in d.figures.rows}\n"
        "| {row.kubelet} | {row.p99_s | .1f} s |\n"
        "{end}\n"
        "{each row in d.figures.rows[kubelet=upstream]}\n"
        "only {row.kubelet}\n"
        "{end}\n"
        "-->\n<!-- /figures -->\n"
    )
    assert figures.run(write=True) == []
    assert "| kubelet | p99 |\n| ours | 0.5 s |\n| upstream | 31.1 s |\nonly upstream\n" in (
        doc.read_text()
    )


def test_this_repository_passes_its_own_check() -> None:
    assert figures.run(write=False) == []


def test_a_block_may_keep_its_template_in_a_file(repo: Path) -> None:
    templates = repo / "benches" / "templates"
    templates.mkdir(parents=True)
    (templates / "status.md").write_text("d=demo\np99 {d.figures.rows[0].p99_s | .2f} s\n")
    doc = repo / "README.md"
    doc.write_text("<!-- figures use=status -->\n<!-- /figures -->\n")
    assert any("differ" in p for p in figures.run(write=False))
    assert figures.run(write=True) == []
    assert doc.read_text() == "<!-- figures use=status -->\np99 0.48 s\n<!-- /figures -->\n"
    doc.write_text("<!-- figures use=gone -->\n<!-- /figures -->\n")
    assert any("no template benches/templates/gone.md" in p for p in figures.run(write=False))
