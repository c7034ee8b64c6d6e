"""``python -m guardcache.emulator``: the emulator as a child process (see ``EmulatorProcess``)."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
