"""``python -m ctxsim``: the ``ctxsim`` command line."""

import sys

from .lab.cli import main

sys.exit(main())
