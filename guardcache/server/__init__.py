"""``guardcache serve``: OpenAI-compatible chat completions through a config's rails (needs the
``server`` extra: starlette, uvicorn, prometheus-client). See the README, "Serving"."""

from guardcache.server.app import create_app
from guardcache.server.settings import ServeSettings, load_configs

__all__ = ["ServeSettings", "create_app", "load_configs"]
