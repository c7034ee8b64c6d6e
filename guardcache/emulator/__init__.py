"""An OpenAI-compatible emulator of the NemoGuard NIMs, for tests, demos and benchmarks.

Real HTTP on loopback, the exact response formats of every guard model NeMo Guardrails calls
(NemoGuard content safety, Llama Guard 1/2/3, Nemotron content-safety reasoning, ShieldGemma, self
check input/output, topic control, jailbreak detect, and with ``vision``/``safety_guard`` the vision
guard Nemotron 3.5 Content Safety, images included; see ``model.py`` and ``images.py``), vLLM's
context-length and body-size refusals, a prefix (KV) cache and latency model calibrated to an 8B
model on one H100, and seeded fault injection (including contradicting duplicate verdict keys).
Start one with
``EmulatorServer`` (current event loop), ``EmulatorServer(...).in_thread()`` (sync code) or
``EmulatorProcess`` (child process), or from the shell with ``guardcache emulate``.
"""

from .client import AdminClient, AsyncAdminClient, EmulatorAdminError
from .config import (
    DEFAULT_MODEL,
    EmulatorConfig,
    FaultConfig,
    KVCacheConfig,
    LatencyConfig,
)
from .engine import Emulator
from .for_config import emulated
from .kvcache import KVCacheStats, PrefixCache
from .policy import Policy
from .process import READY_TAG, EmulatorProcess, parse_ready_line
from .server import EmulatorServer, EmulatorStartError, ThreadedEmulator
from .stats import EmulatorStats
from .tokens import Tokenizer, input_digest, prompt_digest

__all__ = [
    "DEFAULT_MODEL",
    "READY_TAG",
    "AdminClient",
    "AsyncAdminClient",
    "Emulator",
    "EmulatorAdminError",
    "EmulatorConfig",
    "EmulatorProcess",
    "EmulatorServer",
    "EmulatorStartError",
    "EmulatorStats",
    "FaultConfig",
    "KVCacheConfig",
    "KVCacheStats",
    "LatencyConfig",
    "Policy",
    "PrefixCache",
    "ThreadedEmulator",
    "Tokenizer",
    "emulated",
    "input_digest",
    "parse_ready_line",
    "prompt_digest",
]
