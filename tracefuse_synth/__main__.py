import sys

from tracefuse_synth.generator import main

sys.exit(main())
