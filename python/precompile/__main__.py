"""`python -m precompile`: the command line (see `precompile.cli`)."""

import sys

from .cli import main

sys.exit(main())
