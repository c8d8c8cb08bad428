"""`python -m sembp_dsl.cli`: the same as `sbpc`."""

import sys

from .commands import main

sys.exit(main())
