"""A Kubernetes node agent: Python orchestrates, native code runs the hot paths.

``kubelet.__impl__`` says which kernels this process uses: ``native`` (the
Rust module kubelet_native and the Cython stats parsers; the product default)
or ``reference`` (the pure-Python references, chosen with KUBELET_IMPL=reference
for tests and benchmarks only).
"""

from __future__ import annotations

import os

__version__ = "0.1.0"

_impl = os.environ.get("KUBELET_IMPL", "native").strip().lower() or "native"
if _impl not in ("native", "reference"):
    raise ImportError(f"KUBELET_IMPL must be 'native' or 'reference', not {_impl!r}")

if _impl == "native":
    try:
        import kubelet_native as _native
    except ImportError as err:  # never fall back to the slow path silently
        raise ImportError(
            "the native module kubelet_native is missing; build it with "
            "`pip install ./rust .` (or set KUBELET_IMPL=reference in tests)"
        ) from err
    if _native.__version__ != __version__:
        raise ImportError(
            f"kubelet_native {_native.__version__} does not match kubelet {__version__}; "
            "rebuild both with `pip install ./rust .`"
        )

__impl__: str = _impl
