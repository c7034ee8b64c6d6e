"""``python -m guardcache``: the same as the ``guardcache`` command."""

import sys

from guardcache.cli import main

sys.exit(main())
