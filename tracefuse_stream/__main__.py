"""``python -m tracefuse_stream ...`` runs the command line.

A Ctrl-C while the command line itself is being imported ends it like one anywhere
else (exit 130, one line), not with a KeyboardInterrupt traceback.
"""

import sys

try:
    from tracefuse_stream.cli import entry
except KeyboardInterrupt:
    print("tracefuse: error: interrupted (SIGINT); no output written", file=sys.stderr)
    exec("None")  # noqa: S102 - see cli/signals.py: forget_caught_interrupt
    sys.exit(130)

sys.exit(entry())  # cli/signals.py ignore_from_now_on: a signal after the command is over
