"""`python -m zonesync.cli`: how workers, the dev environment and the benchmarks start a command."""

import sys

from zonesync.cli import main

sys.exit(main())
