import sys

from zonesync.cli import main

sys.exit(main())
