"""Running pytest in a subprocess on a tiny generated test module, so that the
outcome a test sees is pytest's own (skip, failure, the report's text)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def run_generated(tmp_path: Path, source: str, ci: str | None, conftest: str = "") -> str:
    """pytest's summary line and report for `source`, with CI set to `ci`."""
    (tmp_path / "test_generated.py").write_text(source)
    (tmp_path / "conftest.py").write_text(conftest)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci is not None:
        env["CI"] = ci
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
         "--rootdir", str(tmp_path), str(tmp_path / "test_generated.py")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    return r.stdout + r.stderr


BROKEN_SCRIPT = "echo 'fetching the part'\necho 'broken on purpose' >&2\nexit 7\n"


def run_lib_sh(
    tmp_path: Path, ci: str | None, parts: dict[str, str], script: str
) -> subprocess.CompletedProcess[str]:
    """`script` in bash after sourcing hack/lib.sh, with CI set to `ci`, the
    part scripts `parts` (name: body) written to tmp_path/parts/<name>.sh."""
    d = tmp_path / "parts"
    d.mkdir(exist_ok=True)
    for name, body in parts.items():
        (d / f"{name}.sh").write_text(body)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["KUBELET_CACHE"] = str(tmp_path / "cache")
    if ci is not None:
        env["CI"] = ci
    return subprocess.run(
        ["bash", "-c", f"source {REPO}/hack/lib.sh\n{script}"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
