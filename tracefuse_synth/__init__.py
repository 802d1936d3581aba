"""Deterministic generator of Kineto-shaped multi-rank traces, for tests, benchmarks
and the bundled ``fixtures/``. Not part of the ``tracefuse_stream`` wheel: the tool
never needs it; it lives beside the package in the repository.

``python -m tracefuse_synth OUT_DIR --sample`` regenerates ``fixtures/sample_run``.
"""
