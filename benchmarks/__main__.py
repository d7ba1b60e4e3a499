"""``python -m benchmarks``: see :mod:`benchmarks.bench`."""

import sys

from .bench import main

sys.exit(main())
