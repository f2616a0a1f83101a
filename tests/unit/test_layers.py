"""The layers of kubelet/ (docs/architecture.md): every import of kubelet's own
code goes to the importer's layer or one below it, and no modules import each
other in a circle. The map below is the rule; a new module gets a place in it."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "kubelet"

# Bottom to top. A path names a module (file.py) or a folder (dir/); the
# longest one that matches a module decides its layer.
LAYERS: list[tuple[str, list[str]]] = [
    ("base", ["__init__.py", "util/", "version.py", "metrics.py", "unsupported.py",
              "types.py", "core_v1/", "fieldpath.py", "lifecycle/predicate.py", "sysctl.py",
              "lifecycle/node_predicates.py", "lifecycle/rejection.py",
              "resourcehelper.py"]),
    ("wire and config", ["client/", "cri/", "apis/", "features.py", "events.py"]),
    ("node services", ["objectcache.py", "token/", "runtimeclass/", "credentialprovider/",
                       "envvars.py", "probe/", "nodelease.py", "watchdog.py", "nodestatus/", "node_lister.py",
                       "cm/", "checkpointmanager/", "images/", "logs/", "certificate/",
                       "simruntime/", "pluginmanager/", "userns/"]),
    ("volume plugins", ["volume/"]),
    ("pod pieces", ["volumemanager/", "container/", "network/", "lifecycle/", "prober/",
                    "podmanager.py", "mirror_client.py", "config/"]),
    ("runtime and status", ["kuberuntime/", "pleg/", "stats/", "eviction/", "preemption/", "nodeshutdown/", "status/",
                            "allocation/",
                            "server/"]),
    ("kubelet", ["pod_workers.py", "pod_sync.py", "kubelet_pods.py", "kubelet_getters.py",
                 "kubelet_node_status.py", "runtime_state.py", "active_pods.py",
                 "runtime_orphans.py"]),
    ("composition", ["kubelet_subsystems.py", "kubelet_runtime_subsystems.py",
                     "kubelet_node_subsystems.py", "kubelet.py", "dependencies.py"]),
    ("entry points", ["cmd/", "__main__.py", "testing/"]),
]  # fmt: skip


def layer_of(rel: str) -> int:
    best, found = -1, -1
    for i, (_, paths) in enumerate(LAYERS):
        for p in paths:
            if (rel == p or (p.endswith("/") and rel.startswith(p))) and len(p) > best:
                best, found = len(p), i
    return found


def modules() -> Iterator[tuple[str, str]]:
    """(path under kubelet/, dotted module name) of every source module."""
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if "_pb2" in rel:
            continue
        dotted = "kubelet." + rel[: -len(".py")].replace("/", ".")
        yield rel, dotted.removesuffix(".__init__")


def path_of(dotted: str, known: dict[str, str]) -> str | None:
    """The module a dotted name imports from (a name inside a module counts as it)."""
    while dotted:
        if dotted in known:
            return known[dotted]
        dotted = dotted.rpartition(".")[0]
    return None


def imports(rel: str, dotted: str, known: dict[str, str]) -> Iterator[tuple[str, int]]:
    """(imported module's path, line) of each import of kubelet's own code."""
    tree = ast.parse((ROOT / rel).read_text())
    package = dotted if rel.endswith("__init__.py") else dotted.rpartition(".")[0]
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            names = [f"{base}.{a.name}" for a in node.names] + [base]
        for name in names:
            if name == "kubelet" or name.startswith("kubelet."):
                target = path_of(name, known)
                if target is not None and target != rel:
                    yield target, node.lineno


def edges() -> list[tuple[str, str, int]]:
    """(importer, imported, line) for every import of kubelet's own code."""
    known = {dotted: rel for rel, dotted in modules()}
    return [(rel, t, line) for rel, dotted in modules() for t, line in imports(rel, dotted, known)]


def upward(found: list[tuple[str, str, int]]) -> list[str]:
    out = []
    for rel, target, line in found:
        if layer_of(target) > layer_of(rel):
            src, dst = LAYERS[layer_of(rel)][0], LAYERS[layer_of(target)][0]
            out.append(f"kubelet/{rel}:{line} ({src}) imports kubelet/{target} ({dst})")
    return out


def circles(found: list[tuple[str, str, int]]) -> list[list[str]]:
    # A lazy import inside a function is still an import: circles count them too.
    g: dict[str, set[str]] = {}
    for rel, target, _ in found:
        g.setdefault(rel, set()).add(target)
    out: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> None:
        state[n] = 1
        stack.append(n)
        for m in sorted(g.get(n, ())):
            if state.get(m) == 1:
                out.append([*stack[stack.index(m) :], m])
            elif m not in state:
                visit(m)
        stack.pop()
        state[n] = 2

    for n in sorted(g):
        if n not in state:
            visit(n)
    return out


def test_every_module_has_a_layer() -> None:
    assert [rel for rel, _ in modules() if layer_of(rel) < 0] == []


def test_imports_only_run_down_the_layers() -> None:
    assert upward(edges()) == []


def test_no_modules_import_each_other_in_a_circle() -> None:
    assert circles(edges()) == []


def test_the_checks_see_what_they_forbid() -> None:
    found = edges()
    # The import graph is really read: the composition root imports the pod workers.
    assert ("kubelet.py", "pod_workers.py") in {(a, b) for a, b, _ in found}
    # An import from the status code up into the composition root is refused ...
    bad = [("status/generate.py", "kubelet.py", 1)]
    assert upward(bad) == [
        "kubelet/status/generate.py:1 (runtime and status) imports kubelet/kubelet.py (composition)"
    ]
    # ... and two modules that import each other are a circle.
    assert circles([("a.py", "b.py", 1), ("b.py", "a.py", 2)]) == [["a.py", "b.py", "a.py"]]
