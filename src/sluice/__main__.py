"""`python -m sluice`: the `sluice` command."""

import sys

from sluice.cli.main import main

sys.exit(main())
