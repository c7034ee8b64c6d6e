"""Suite-wide settings.

In CI (``CI=true``) hypothesis runs derandomized: the same examples every run, so a red build always
reproduces. Locally it explores new examples each run, which is where new counterexamples come from.

guardcache's pytest fixtures (emulators, redis-server, a fake main model) are enabled the way an app
enables them: ``pytest_plugins`` in the root conftest.
"""

from __future__ import annotations

import os

from hypothesis import settings

pytest_plugins = ["guardcache.testing.pytest_plugin"]

settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
settings.register_profile("dev", deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")
