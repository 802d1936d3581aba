#!/usr/bin/env python3
"""Write synthetic multi-rank benchmark inputs (thin wrapper of ``tracefuse_synth``).

Kept as a script so benchmarks can be run from a checkout without installing the
package. Examples::

    python benchmarks/generate.py bench_out/8x256 --ranks 8 --mb-per-rank 256 --jobs 4
    python benchmarks/generate.py bench_out/4g --ranks 1 --mb-per-rank 4000
    python benchmarks/generate.py bench_out/gz --ranks 8 --mb-per-rank 64 --gzip \\
        --hosts 2 --host-offset-us 1200 --jitter-us 2

See ``python benchmarks/generate.py --help`` for every option.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tracefuse_synth.generator import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
