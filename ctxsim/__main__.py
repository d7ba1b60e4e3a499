"""``python -m ctxsim``: the ``ctxsim`` command line."""

import sys

from .cli import main

sys.exit(main())
