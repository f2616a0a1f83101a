"""No module under tests/ or benches/ imports from a test module (test_*.py).
What tests share lives in a helper module beside them (helpers.py,
fixtures.py) or in kubelet/testing/, so that running, moving or deleting one
test file never changes which tests another file collects or how it runs."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _is_test_module(dotted: str) -> bool:
    return dotted.rsplit(".", 1)[-1].startswith("test_")


def imports_of_test_modules(source: str) -> Iterator[tuple[int, str]]:
    """(line, module) of each import in `source` that reaches a test module:
    `from x.test_y import z`, `import x.test_y`, `from x import test_y`, and
    their relative forms."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if any(_is_test_module(part) for part in alias.name.split(".")):
                    yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            if node.module and any(_is_test_module(p) for p in node.module.split(".")):
                yield node.lineno, base
                continue
            for alias in node.names:
                if _is_test_module(alias.name):
                    yield node.lineno, f"{base}.{alias.name}".replace("..", ".")


def sources() -> Iterator[Path]:
    for top in ("tests", "benches"):
        yield from sorted((REPO / top).rglob("*.py"))


def test_no_module_imports_from_a_test_module() -> None:
    found = [
        f"{path.relative_to(REPO)}:{line} imports {module}"
        for path in sources()
        for line, module in imports_of_test_modules(path.read_text())
    ]
    assert found == [], "move what is shared into a helper module:\n" + "\n".join(found)


def test_the_check_sees_every_form_of_import() -> None:
    forbidden = [
        "from tests.unit.cm.test_device_manager import until",
        "import tests.unit.cm.test_device_manager",
        "import tests.unit.cm.test_device_manager as dm",
        "from tests.unit.cm import test_device_manager",
        "from .test_device_manager import until",
        "from . import test_device_manager",
        "def f():\n    from tests.unit.cm.test_cpu_manager import cm\n",
    ]
    for src in forbidden:
        assert list(imports_of_test_modules(src)), src
    allowed = [
        "from tests.unit.cm.fixtures import Pods",
        "from tests.unit.cm import helpers",
        "from kubelet.testing.wait import wait_for_async",
        "import tests.integration.cluster.helpers",
        "from .helpers import pod",
    ]
    for src in allowed:
        assert not list(imports_of_test_modules(src)), src
