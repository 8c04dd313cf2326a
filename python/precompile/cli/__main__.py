"""`python -m precompile.cli`: the command line, as `python -m precompile`."""

import sys

from .main import main

sys.exit(main())
