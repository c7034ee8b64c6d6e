"""The checks' runtime, above the config: one folder per check (its answer parsers and, for a check
that is not a chat check, its runtime), and the pieces every check shares (``check.py``: LLMCheck;
``verdict.py``, ``answer.py``, ``codec.py``; ``catalog.py``: each folder's parsers and builder).

A check's flows are data in :mod:`guardcache.flows`, below the config, which validates against them
without importing anything here. Import submodules directly (``guardcache.checks.check``): this
package imports nothing.
"""
