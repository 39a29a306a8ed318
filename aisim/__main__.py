"""`python -m aisim`."""

import sys

from .cli import main

sys.exit(main())
