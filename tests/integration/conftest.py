"""Integration tests: real servers (NIM emulators, redis-server) on loopback.

The fixtures (``emulator``, ``emulator_factory``, ``redis_server``, ``redis_url``, ``echo_llm``) come
from ``guardcache.testing.pytest_plugin``, enabled for the whole suite in ``tests/conftest.py``, the
way an app enables them for its own tests; every test here is marked ``integration`` there too.
"""
