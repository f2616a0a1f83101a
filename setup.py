"""Build step for the parts pyproject.toml cannot declare: Cython modules and CRI stubs.

Every pyx/<name>.pyx becomes the extension module kubelet.stats.<name>.
The CRI .proto under kubelet/cri/api/ is compiled to Python with grpcio-tools
so the generated code is never committed.
"""

from __future__ import annotations

import glob
import importlib.util
import os

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


def _generate_cri_stubs() -> None:
    spec = importlib.util.spec_from_file_location(
        "gen_proto", os.path.join(HERE, "hack", "gen_proto.py")
    )
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.generate(HERE)


class BuildPy(build_py):
    def run(self) -> None:
        _generate_cri_stubs()
        super().run()


def _extensions() -> list[Extension]:
    from Cython.Build import cythonize

    exts = [
        Extension(
            f"kubelet.stats.{os.path.splitext(os.path.basename(p))[0]}",
            [os.path.relpath(p, HERE)],
            # OpenMP: cgstats parses a batch of cgroups on several threads.
            extra_compile_args=["-O3", "-fopenmp"],
            extra_link_args=["-fopenmp"],
        )
        for p in sorted(glob.glob(os.path.join(HERE, "pyx", "*.pyx")))
    ]
    return cythonize(
        exts,
        language_level=3,
        compiler_directives={"boundscheck": False, "wraparound": False, "cdivision": True},
    )


setup(ext_modules=_extensions(), cmdclass={"build_py": BuildPy})
