"""Builds the optional compiled kernel (tracefuse_stream/_kernel.c and its parts in
tracefuse_stream/csrc/; see tracefuse_stream/native.py).

Everything else is in pyproject.toml. The extension is optional: where it cannot be
compiled (no compiler, no Python headers) the install still succeeds and every stage
takes its pure-Python path, byte for byte the same output (tests/test_kernel.py checks
both; in CI a missing kernel is a test failure).
"""

from glob import glob

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "tracefuse_stream._kernel",
            sources=["tracefuse_stream/_kernel.c"],
            # its parts, #included into that one translation unit (listed so that a
            # change rebuilds it and the sdist carries them)
            depends=sorted(glob("tracefuse_stream/csrc/*")),
            optional=True,
            extra_compile_args=["-O2", "-std=gnu11"],
        )
    ]
)
