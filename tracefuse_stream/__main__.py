"""``python -m tracefuse_stream ...`` runs the command line."""

import sys

from tracefuse_stream.cli.app import main

sys.exit(main())
