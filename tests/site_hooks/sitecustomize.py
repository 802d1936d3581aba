"""Run by Python at start-up in every subprocess the test suite starts (tests/conftest.py
puts this directory on ``PYTHONPATH``): installs the suite's test-only switches
(tracefuse_testhooks.py) for a CLI merge, and nothing when neither switch is set."""

import os

if os.environ.get("TRACEFUSE_VERIFY") == "1" or os.environ.get("TRACEFUSE_TEST_SIGNAL_AFTER_BYTES"):
    import tracefuse_testhooks

    tracefuse_testhooks.install_lazily()
