"""Compile the project's .proto files to Python with grpcio-tools.

Run by the build (setup.py) and by hand: `python hack/gen_proto.py`.
Paths are taken from the repo root so the generated modules import each
other as kubelet.cri.api.*; the generated files are not committed.
"""

from __future__ import annotations

import glob
import os
import sys


def generate(root: str, force: bool = False) -> list[str]:
    import grpc_tools
    from grpc_tools import protoc

    include = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    done = []
    for proto in sorted(glob.glob(os.path.join(root, "kubelet", "**", "*.proto"), recursive=True)):
        rel = os.path.relpath(proto, root)
        out = os.path.splitext(proto)[0] + "_pb2.py"
        if not force and os.path.exists(out) and os.path.getmtime(out) >= os.path.getmtime(proto):
            continue
        args = [
            "protoc",
            f"-I{root}",
            f"-I{include}",
            f"--python_out={root}",
            f"--pyi_out={root}",
            f"--grpc_python_out={root}",
            rel,
        ]
        if protoc.main(args) != 0:
            raise RuntimeError(f"protoc failed on {rel}")
        done.append(rel)
    return done


if __name__ == "__main__":
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for p in generate(here, force="--force" in sys.argv):
        print("generated", p)
