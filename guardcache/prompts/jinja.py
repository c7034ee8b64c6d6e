"""Compiled prompt templates: NeMo Guardrails' Jinja syntax, rendered in a locked-down sandbox.

A template is compiled once per distinct text (``compile_template``, cached, thread-safe) and then
rendered with the check's variables (``user_input``, ``bot_response``: untrusted text) and the
runtime's read-only settings (``reasoning_enabled``, ...). Rendering is single-pass by construction:
a variable's value is inserted as text and never parsed as template code, so a user message holding
``{{ bot_response }}`` or ``{% if %}`` reaches the model verbatim.

The environment (``ENVIRONMENT``):
- ``ImmutableSandboxedEnvironment``: no ``_``-prefixed or internal attributes, no mutation of lists
  or dicts, ``str.format`` checked; on top of it, attributes may only be read from plain data
  (strings, numbers, lists, mappings, loop and namespace objects), never from an arbitrary object;
- ``StrictUndefined``: a missing name is an error, never an empty string (``is defined`` works);
- ``autoescape=False`` (prompts are not HTML) and ``keep_trailing_newline=True``, so a template made
  of plain ``{{ name }}`` placeholders renders exactly the bytes of guardcache's former renderer;
- no loader (``include``/``extends``/``import`` are refused when the template loads), no extensions;
  the globals are ``range`` (capped by the sandbox), ``dict`` and ``namespace`` only;
- filters: Jinja's built-ins but ``random``, plus NeMo's ``indent``, ``user_assistant_sequence``,
  ``to_chat_messages``, ``first_turns``, ``last_turns`` (``filters``); ``*`` and ``**`` may not build
  huge strings, lists or numbers.

A render depends only on (template, variables, settings): no clock, no randomness. So a check may key
its cache on the variables (and settings) and skip rendering on a hit.
"""

from __future__ import annotations

import difflib
import functools
import types
from collections.abc import Collection, Iterator, Mapping, Sequence, Set
from dataclasses import dataclass, field
from typing import Any

from jinja2 import StrictUndefined, TemplateSyntaxError, meta, nodes
from jinja2.exceptions import SecurityError
from jinja2.runtime import LoopContext, new_context
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import Namespace

from guardcache.prompts.filters import FILTERS, NEMO_DIALOG_FILTERS, REMOVED_FILTERS
from guardcache.prompts.nemo_defaults import (
    default_instructions,
    default_sample_conversation,
    general_instructions,
)

#: Longest string or list ``*`` may build, and the largest exponent ``**`` accepts.
MAX_REPEAT_LENGTH = 100_000
MAX_EXPONENT = 1_000
_GLOBALS = ("range", "dict", "namespace")
_PLAIN_TYPES: tuple[type, ...] = (
    str,
    int,
    float,
    tuple,
    list,
    dict,
    frozenset,
    set,
    range,
    types.MappingProxyType,
    LoopContext,
    Namespace,
)
_FORBIDDEN_TAGS: dict[type[nodes.Node], str] = {
    nodes.Extends: "extends",
    nodes.Include: "include",
    nodes.Import: "import",
    nodes.FromImport: "from ... import",
}


class _Sandbox(ImmutableSandboxedEnvironment):
    """The sandbox, narrowed to plain data and bounded repetition."""

    intercepted_binops = frozenset({"*", "**"})

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        return isinstance(obj, _PLAIN_TYPES) and super().is_safe_attribute(obj, attr, value)

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "**":
            if isinstance(right, int | float) and abs(right) > MAX_EXPONENT:
                raise SecurityError(f"exponent {right!r} is larger than {MAX_EXPONENT}")
        else:
            for seq, times in ((left, right), (right, left)):
                repeated = isinstance(seq, str | list | tuple) and isinstance(times, int)
                if repeated and len(seq) * times > MAX_REPEAT_LENGTH:
                    raise SecurityError(f"'*' would build more than {MAX_REPEAT_LENGTH} items")
        return super().call_binop(context, operator, left, right)


def _make_environment() -> _Sandbox:
    env = _Sandbox(
        undefined=StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        auto_reload=False,
        cache_size=0,
    )
    env.globals = {name: env.globals[name] for name in _GLOBALS}
    for name in REMOVED_FILTERS:
        env.filters.pop(name, None)
    env.filters.update(FILTERS)
    return env


#: The one environment every prompt is compiled in (configured once, then only read).
ENVIRONMENT = _make_environment()


# --- settings ----------------------------------------------------------------------------------


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


_UNSET: Any = _Unset()


@dataclass(frozen=True, slots=True)
class Setting:
    """A read-only value the runtime may pass to every template, with its type and default.

    A setting without a default (``default=UNSET``) is undefined unless given; a template using it
    must test ``is defined``.
    """

    name: str
    kind: type | tuple[type, ...]
    default: Any = _UNSET
    doc: str = ""

    @property
    def has_default(self) -> bool:
        return self.default is not _UNSET


UNSET = _UNSET
KNOWN_SETTINGS: dict[str, Setting] = {}
"""Every setting a template may read, by name. Extend it with ``register_setting``."""


def register_setting(setting: Setting) -> Setting:
    """Add a setting to ``KNOWN_SETTINGS``; the same name with a different spec is a bug."""
    existing = KNOWN_SETTINGS.get(setting.name)
    if existing is not None and existing != setting:
        raise ValueError(f"setting {setting.name!r} is already registered as {existing!r}")
    if setting.name in _GLOBALS:
        raise ValueError(f"setting {setting.name!r} would hide the template global of that name")
    if setting.has_default:
        _freeze(setting.default, setting.name)
    KNOWN_SETTINGS[setting.name] = setting
    clear_cache()
    return setting


def _freeze(value: Any, where: str) -> Any:
    """A deep copy of plain data (mappings -> dict, sequences and sets -> tuple); ``TypeError`` for
    anything else. A copy: a caller changing its own dict later cannot change a check's prompt."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, Mapping):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str | int):
                raise TypeError(f"setting {where}: keys must be strings or integers, not {key!r}")
            out[key] = _freeze(item, f"{where}[{key!r}]")
        return out
    if isinstance(value, list | tuple):
        return tuple(_freeze(item, f"{where}[{i}]") for i, item in enumerate(value))
    if isinstance(value, Set):
        return tuple(sorted((_freeze(item, where) for item in value), key=repr))
    raise TypeError(
        f"setting {where}: expected plain data (bool, number, string, list or mapping), "
        f"not {type(value).__name__}"
    )


class Settings(Mapping[str, Any]):
    """Validated, frozen settings for rendering: the given values plus every default.

    Build it once per check (it is immutable and shared by concurrent renders); a plain mapping
    passed to a render function is turned into one on each call.
    """

    __slots__ = ("_context", "_values")

    def __init__(self, values: Mapping[str, Any] | None = None) -> None:
        given = dict(values or {})
        frozen: dict[str, Any] = {}
        for name, value in given.items():
            setting = KNOWN_SETTINGS.get(name)
            if setting is None:
                known = ", ".join(sorted(KNOWN_SETTINGS)) or "none"
                raise ValueError(f"unknown setting {name!r}{_hint(name, KNOWN_SETTINGS)} (known: {known})")
            if not isinstance(value, setting.kind) or (setting.kind is not bool and isinstance(value, bool)):
                raise TypeError(f"setting {name!r} must be {_kind_name(setting.kind)}, not {_show(value)}")
            frozen[name] = _freeze(value, name)
        for name, setting in KNOWN_SETTINGS.items():
            if name not in frozen and setting.has_default:
                frozen[name] = _freeze(setting.default, name)
        self._values: dict[str, Any] = frozen
        # What every render starts from: the environment's globals, then the settings.
        self._context: dict[str, Any] = {**ENVIRONMENT.globals, **frozen}

    @classmethod
    def of(cls, settings: Mapping[str, Any] | None) -> Settings:
        """``settings`` itself if it is a ``Settings``, else validated into one."""
        if isinstance(settings, Settings):
            return settings
        if not settings:
            return _default_settings()
        return cls(settings)

    def __getitem__(self, name: str) -> Any:
        return self._values[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"Settings({self._values!r})"


@functools.cache
def _default_settings() -> Settings:
    return Settings()


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    names = {
        bool: "true or false",
        Mapping: "a mapping",
        str: "a string",
        int: "a number",
        float: "a number",
        type(None): "null",
    }
    return " or ".join(dict.fromkeys(names.get(k, "a list") for k in kinds))


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return type(value).__name__


def _hint(name: str, choices: Collection[str]) -> str:
    close = difflib.get_close_matches(name, list(choices), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


# --- compiling ---------------------------------------------------------------------------------


class TemplateCompileError(ValueError):
    """A template that cannot be compiled: syntax errors, refused tags or filters (``problems``)."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = tuple(problems)
        super().__init__("; ".join(self.problems))


class TemplateRenderError(ValueError):
    """A template failed while rendering (a bug in the template or a wrong setting).

    The message names the template line and the kind of error but never the error's own text, which
    may quote the user's message; that text is kept in ``detail`` for whoever debugs the template.
    """

    def __init__(self, kind: str, line: int | None, detail: str) -> None:
        where = f" on line {line}" if line is not None else ""
        super().__init__(f"the prompt template failed{where}: {kind}")
        self.kind = kind
        self.line = line
        self.detail = detail


@dataclass(frozen=True, slots=True)
class _Analysis:
    """What loading a template text found: the AST (``None`` on a syntax error), the names it reads
    with the line each is first read on, and the problems that stop it from compiling."""

    ast: nodes.Template | None
    names: Mapping[str, int] = field(default_factory=dict)
    problems: tuple[str, ...] = ()


@functools.lru_cache(maxsize=512)
def _analyze(source: str) -> _Analysis:
    if "\r" in source:
        return _Analysis(
            None,
            problems=(
                "the template contains a carriage return ('\\r'): Jinja would send it as '\\n', "
                "changing the prompt's bytes; use '\\n' line breaks",
            ),
        )
    try:
        ast = ENVIRONMENT.parse(source)
    except TemplateSyntaxError as exc:
        return _Analysis(None, problems=(f"template syntax error on line {exc.lineno}: {exc.message}",))
    problems: list[str] = []
    unknown_filters: set[str] = set()
    unknown_tests: set[str] = set()
    checked: tuple[type[nodes.Node], ...] = (nodes.Filter, nodes.Test, *_FORBIDDEN_TAGS)
    for node in ast.find_all(checked):
        if isinstance(node, nodes.Filter) and node.name not in ENVIRONMENT.filters:
            unknown_filters.add(node.name)
            problems.append(_filter_problem(node.name, node.lineno))
        elif isinstance(node, nodes.Test) and node.name not in ENVIRONMENT.tests:
            unknown_tests.add(node.name)
            problems.append(
                f"unknown test '{node.name}' on line {node.lineno}{_hint(node.name, ENVIRONMENT.tests)}"
            )
        elif type(node) in _FORBIDDEN_TAGS:
            problems.append(
                f"'{{% {_FORBIDDEN_TAGS[type(node)]} %}}' on line {node.lineno} is not supported: "
                "a prompt is one self-contained template"
            )
    names = _read_names(ast, source, unknown_filters, unknown_tests)
    return _Analysis(ast, names, tuple(dict.fromkeys(problems)))


def _filter_problem(name: str, line: int) -> str:
    if name in NEMO_DIALOG_FILTERS:
        return (
            f"filter '{name}' on line {line} is a NeMo Guardrails dialog filter (it formats a Colang "
            "conversation history): guard checks have no dialog history"
        )
    if name in REMOVED_FILTERS:
        return (
            f"filter '{name}' on line {line} is not available: a guard prompt must render the same "
            "bytes for the same input (the verdict cache and the server's KV-cache reuse rely on it)"
        )
    return f"unknown filter '{name}' on line {line}{_hint(name, ENVIRONMENT.filters)}"


def _read_names(
    ast: nodes.Template, source: str, unknown_filters: Set[str], unknown_tests: Set[str]
) -> dict[str, int]:
    """The names the template reads from its context (not set by itself, not globals), in order of
    first appearance, with that line."""
    if unknown_filters or unknown_tests:
        # jinja2.meta compiles the template and fails on an unknown filter: analyse with stand-ins so
        # a template with a bad filter still gets its unknown variables reported.
        env = ENVIRONMENT.overlay()
        env.filters = {**ENVIRONMENT.filters, **{n: _stand_in for n in unknown_filters}}
        env.tests = {**ENVIRONMENT.tests, **{n: _stand_in for n in unknown_tests}}
        ast = env.parse(source)
    undeclared = meta.find_undeclared_variables(ast) - set(ENVIRONMENT.globals)
    names: dict[str, int] = {}
    for node in ast.find_all(nodes.Name):
        if node.ctx == "load" and node.name in undeclared and node.name not in names:
            names[node.name] = node.lineno
    for name in sorted(undeclared - names.keys()):  # not reached in practice: every read is a Name
        names[name] = 1
    return names


def _stand_in(value: Any, *args: Any, **kwargs: Any) -> Any:
    return value


def _static_prefix(ast: nodes.Template) -> str:
    """The literal text the template always starts with: its leading template data, up to the first
    expression, tag or statement (whitespace control and newline handling already applied)."""
    parts: list[str] = []
    for node in ast.body:
        if not isinstance(node, nodes.Output):
            break
        for child in node.nodes:
            if not isinstance(child, nodes.TemplateData):
                return "".join(parts)
            parts.append(child.data)
    return "".join(parts)


@dataclass(frozen=True, slots=True, eq=False)
class CompiledTemplate:
    """One template text, compiled once; render it as often as needed, from any thread.

    ``names`` are the names it reads (variables and settings, in order of first appearance);
    ``static_prefix`` is the literal text every render starts with (what a server reuses from its KV
    cache).
    """

    source: str
    names: tuple[str, ...]
    static_prefix: str
    _template: Any = field(repr=False)
    _required: tuple[str, ...] = field(repr=False)

    def render(self, variables: Mapping[str, str], settings: Mapping[str, Any] | None = None) -> str:
        """The template with ``variables`` (strings: the check's texts) and ``settings``.

        ``KeyError`` for a variable the template reads that is neither given nor a setting,
        ``TypeError`` for a value that is not a string, a history or ``None`` (what NeMo passes for a
        value it does not have, e.g. ``history`` outside topic control), ``TemplateRenderError`` if
        the template fails.
        """
        bound = Settings.of(settings)
        for name in self._required:
            if name not in variables:
                given = ", ".join(variables) or "none"
                raise KeyError(f"no value for variable {{{{ {name} }}}} (given: {given})")
        for name, value in variables.items():
            if value is not None and not isinstance(value, str) and not _is_history(value):
                raise TypeError(
                    f"value of {name!r} must be a str, a history of messages or None, "
                    f"not {type(value).__name__}"
                )
            if name in bound._values:
                raise ValueError(f"variable {name!r} has the name of a setting")
        template = self._template
        # The context holds globals, settings and variables already: shared=True and no globals spare
        # Template.render() copying them again (it would triple the cost of a render).
        context = new_context(ENVIRONMENT, None, template.blocks, {**bound._context, **variables}, True)
        try:
            return "".join(template.root_render_func(context))
        except Exception as exc:
            raise TemplateRenderError(type(exc).__name__, _template_line(template, exc), str(exc)) from None


def _template_line(template: Any, exc: BaseException) -> int | None:
    line = None
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "<template>":
            line = template.get_corresponding_lineno(tb.tb_lineno)
        tb = tb.tb_next
    return line


def _is_history(value: Any) -> bool:
    """A conversation (``history``): a tuple or list of ``{"role", "content"}`` string mappings,
    which NeMo's history filters (``user_assistant_sequence``, ``to_chat_messages``...) read."""
    return isinstance(value, tuple | list) and all(
        isinstance(m, Mapping) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
        for m in value
    )


@functools.lru_cache(maxsize=512)
def compile_template(source: str) -> CompiledTemplate:
    """The compiled template for ``source`` (one compilation per distinct text, cached and shared).

    Raises ``TemplateCompileError`` for a syntax error (with its line), an unknown or refused filter
    or test, ``include``/``extends``/``import``, or a carriage return. Names the template reads are
    checked against a task's variables by ``template_problems``, not here.
    """
    analysis = _analyze(source)
    if analysis.problems or analysis.ast is None:
        raise TemplateCompileError(analysis.problems)
    prefix = _static_prefix(analysis.ast)
    # From the text, not the cached AST: compiling optimizes (rewrites) the tree it is given.
    template = ENVIRONMENT.from_string(source)
    names = tuple(analysis.names)
    required = tuple(n for n in names if n not in KNOWN_SETTINGS)
    return CompiledTemplate(source, names, prefix, template, required)


def template_problems(
    source: str,
    allowed: Collection[str],
    *,
    settings: Collection[str] | None = None,
    fixed: Mapping[str, Any] | None = None,
) -> list[str]:
    """What is wrong with a template whose task provides the variables ``allowed``; empty if fine.

    ``fixed`` are variables the task always renders with one value (NeMo's ``history`` is ``None``
    outside topic control); they are allowed too, and the trial render uses their values.
    Reported: syntax errors (with the line), refused or unknown filters and tests,
    ``include``/``extends``/``import``, names that are neither an allowed variable nor a setting
    (``settings``: default every known setting), and a template that fails when rendered with
    sample text and the default settings (each boolean setting it reads is also tried flipped).
    """
    fixed = dict(fixed or {})
    allowed = {*allowed, *fixed}
    known = set(KNOWN_SETTINGS) if settings is None else set(settings)
    analysis = _analyze(source)
    problems = list(analysis.problems)
    names = ", ".join(sorted(allowed)) or "none"
    setting_names = ", ".join(sorted(known)) or "none"
    for name, line in analysis.names.items():
        if name not in allowed and name not in known:
            problems.append(
                f"unknown variable '{name}' on line {line}{_hint(name, [*allowed, *known])} "
                f"(this task can use: {names}; settings: {setting_names})"
            )
    if problems:
        return problems
    return _trial_render(compile_template(source), allowed, fixed)


def _trial_render(
    compiled: CompiledTemplate, allowed: Collection[str], fixed: Mapping[str, Any]
) -> list[str]:
    sample: dict[str, Any] = {
        name: "Hello" for name in allowed if name not in KNOWN_SETTINGS and name not in fixed
    }
    if "history" in sample:  # a conversation (topic control's), which NeMo's history filters read
        sample["history"] = ({"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi"})
    sample.update(fixed)
    trials: list[tuple[str, dict[str, Any]]] = [("with the default settings", {})]
    for name in compiled.names:
        setting = KNOWN_SETTINGS.get(name)
        if setting is not None and setting.kind is bool and setting.has_default:
            flipped = not setting.default
            trials.append((f"with {name}={'true' if flipped else 'false'}", {name: flipped}))
    for label, values in trials:
        try:
            compiled.render(sample, values)
        except TemplateRenderError as exc:
            where = f" on line {exc.line}" if exc.line is not None else ""
            return [f"the template fails {label}{where}: {exc.kind}: {exc.detail}"]
    return []


def clear_cache() -> None:
    """Forget every compiled template and the default settings (after a setting is registered)."""
    compile_template.cache_clear()
    _analyze.cache_clear()
    _default_settings.cache_clear()


register_setting(
    Setting(
        "reasoning_enabled",
        bool,
        False,
        "whether a reasoning guard (Nemotron Content Safety Reasoning) is asked to think (/think) or to "
        "answer at once (/no_think); NeMo's rails.config.content_safety.reasoning.enabled",
    )
)
register_setting(
    Setting(
        "categories",
        Mapping,
        UNSET,
        "safety categories, code -> description; prompts listing them test 'categories is defined' "
        "and fall back to their own list",
    )
)
register_setting(
    Setting(
        "excluded_category_keys",
        (list, tuple, set, frozenset),
        (),
        "category codes a prompt leaves out of its category list",
    )
)

# The values NeMo Guardrails' prompts read that guardcache has fixed values for (docs/nemo-guardrails.md,
# "Template variables"): what NeMo's task manager gives every prompt and what its
# actions pass beside the checked texts. A template reading one gets NeMo's value, and the
# fingerprint (so the cache namespace) covers the value it read.
register_setting(
    Setting(
        "reasoning_mode",
        bool,
        False,
        "the name NeMo's first Nemotron Content Safety Reasoning example read for "
        "rails.config.content_safety.reasoning.enabled (NeMo never passed it: there it was always off)",
    )
)
register_setting(
    Setting(
        "config",
        Mapping,
        {
            "content_safety": {
                "reasoning": {"enabled": False},
                "multilingual": {"enabled": False, "refusal_messages": None},
            }
        },
        "NeMo's rails.config as templates read it (config.content_safety.reasoning.enabled); the "
        "sections guardcache reads (content_safety) only",
    )
)
register_setting(
    Setting(
        "bot_thinking",
        type(None),
        None,
        "the main model's reasoning trace (NeMo's self check output); guardcache reads none, so it is "
        "None, as in NeMo for a model without one: false in {% if %}, printed as 'None'",
    )
)
register_setting(
    Setting(
        "relevant_chunks",
        str,
        "",
        "knowledge-base chunks (NeMo fills them only for bot-message generation and fact checking); "
        "guardcache has no knowledge base, so it is empty, as a guard prompt renders it in NeMo",
    )
)
register_setting(
    Setting(
        "general_instructions",
        str,
        general_instructions(default_instructions()),
        "the content of the config's first general instruction (NeMo's default when it has none)",
    )
)
register_setting(
    Setting(
        "sample_conversation",
        (str, type(None)),
        default_sample_conversation(),
        "the config's sample_conversation (NeMo's default when it has none)",
    )
)
register_setting(
    Setting(
        "sample_conversation_two_turns",
        (str, type(None)),
        default_sample_conversation(),
        "the same value as sample_conversation (NeMo passes both)",
    )
)


__all__ = [
    "ENVIRONMENT",
    "KNOWN_SETTINGS",
    "MAX_EXPONENT",
    "MAX_REPEAT_LENGTH",
    "UNSET",
    "CompiledTemplate",
    "Setting",
    "Settings",
    "TemplateCompileError",
    "TemplateRenderError",
    "clear_cache",
    "compile_template",
    "register_setting",
    "template_problems",
]
