"""Commands that live above every layer they use, rather than in a folder below one of them.

``cache.py`` is ``guardcache cache stats|clear``: it inspects the Redis tier (``guardcache.cache``,
a leaf) with the settings of a config (``guardcache.config``), so it cannot live in ``cache/redis/``
without an arrow running back up. Commands whose folder is already above what they use stay there
(``server/cli.py``, ``demo/cli.py``, ``emulator/cli.py``, ``rails/cli.py``).
"""
