"""Checks: one folder per check (its flows and answer parsers), and the runtime pieces they share.

Import submodules directly (``guardcache.checks.check``, ``guardcache.checks.catalog``): this
package imports nothing, so the config can load the flow catalog without the runtime.
"""
