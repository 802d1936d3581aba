"""Builds the optional C rewrite kernel (tracefuse_stream/rewrite/_kernel.c).

Everything else is in pyproject.toml. The extension is optional: where it cannot be
compiled (no compiler, no Python headers) the install still succeeds and merges take
the pure-Python path, byte for byte the same output (tests/test_kernel.py checks both).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "tracefuse_stream.rewrite._kernel",
            sources=["tracefuse_stream/rewrite/_kernel.c"],
            optional=True,
            extra_compile_args=["-O2", "-std=gnu11"],
        )
    ]
)
