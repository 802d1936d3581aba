"""Builds the optional compiled kernel (tracefuse_stream/_kernel.c; see tracefuse_stream/native.py).

Everything else is in pyproject.toml. The extension is optional: where it cannot be
compiled (no compiler, no Python headers) the install still succeeds and every stage
takes its pure-Python path, byte for byte the same output (tests/test_kernel.py checks
both; in CI a missing kernel is a test failure).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "tracefuse_stream._kernel",
            sources=["tracefuse_stream/_kernel.c"],
            optional=True,
            extra_compile_args=["-O2", "-std=gnu11"],
        )
    ]
)
