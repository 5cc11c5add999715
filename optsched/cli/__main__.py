"""``python -m optsched.cli``."""

import sys

from optsched.cli import main

sys.exit(main())
