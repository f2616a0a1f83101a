"""What a kubelet loads at start that it may never use: the libraries of
optional subsystems are imported when the subsystem starts, not before."""

from __future__ import annotations

import subprocess
import sys

# Loaded on demand only: D-Bus (graceful node shutdown) and the XML parser it
# brings with it.
ON_DEMAND = ("dbus_fast", "xml.etree.ElementTree")


def test_optional_libraries_are_not_loaded_by_the_kubelet_entry_point() -> None:
    code = (
        "import sys, kubelet.cmd.run; "
        f"print(','.join(m for m in {ON_DEMAND!r} if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == ""
