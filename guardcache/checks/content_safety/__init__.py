"""NemoGuard Content Safety: the answer parsers of its input and output rails (their flows:
``guardcache.flows.content_safety``)."""
