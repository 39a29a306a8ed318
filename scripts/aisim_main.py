"""The frozen program's `__main__` (aisim/__main__.py imports relatively, which a script run as
`__main__` cannot)."""

import sys

from aisim.cli import main

sys.exit(main())
