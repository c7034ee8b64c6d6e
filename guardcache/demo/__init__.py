"""``guardcache demo``: a workload replayed through cached rails against emulated NIMs."""

from guardcache.demo.workload import Turn, build_workload

__all__ = ["Turn", "build_workload"]
