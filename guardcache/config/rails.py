"""``RailsConfig``: a whole ``config.yml`` (+ ``prompts.yml``), its rails and the cross-checks.

The format is NeMo Guardrails' so its content-safety configs load unchanged. Unknown keys are errors
(a typo like ``maxsixe`` must not silently leave the cache at its default), except NeMo settings that
guardcache does not use, which are accepted, ignored and listed in one warning (``nemo_compat``).
Every failure is a ``ConfigError`` naming the file and the field path (``errors``).
"""

from __future__ import annotations

import difflib
import logging
import os
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from guardcache.config.errors import FieldError, Loc, Problem, format_loc, from_validation_error, show
from guardcache.config.fields import STRICT, PositiveFloat, PositiveInt, null_is_empty, reject_bool
from guardcache.config.files import (
    ConfigFiles,
    ConfigLimits,
    ConfigReader,
    MergedSources,
    find_config_files,
    flow_base_name,
    listed_flows,
    merge_yaml,
)
from guardcache.config.models import INLINE_KEY_ADVICE, ModelConfig
from guardcache.config.nemo_compat import strip_unused_nemo_keys
from guardcache.config.prompts import (
    TaskPrompt,
    default_prompts,
    fixed_variables,
    judges_images,
    select_prompt,
    split_task,
    with_defaults,
)
from guardcache.config.settings import RailSettings
from guardcache.config.shadow import ShadowSettings
from guardcache.errors import ConfigError
from guardcache.flows import DEFAULT_MAX_INPUT_CHARS, KNOWN_FLOWS, FlowRef, FlowSpec, prompt_variables
from guardcache.prompts.nemo_defaults import (
    default_instructions,
    default_sample_conversation,
    general_instructions,
)
from guardcache.prompts.parts import DEFAULT_MAX_IMAGE_BYTES, DEFAULT_MAX_IMAGES, ImageLimits
from guardcache.prompts.render import template_problems

logger = logging.getLogger(__name__)

JAILBREAK_KEY = "jailbreak_detection"

TOOL_SECTIONS: dict[str, str] = {"tool_input": "input", "tool_output": "output"}
"""NeMo's tool rails sections and the direction of the flows each takes."""


class OutputStreaming(BaseModel):
    """``rails.output.streaming`` (NeMo's): check a streamed answer in windows as it is generated.

    A window is ``chunk_size`` streamed tokens (the main model's stream deltas) plus up to
    ``context_size`` tokens before them; each window is checked as ``bot_response`` through the same
    cached checks. ``stream_first``: send a chunk before its check is in (lower latency; a block
    then ends the stream after text the user has seen). guardcache's default is ``false``, stricter
    than NeMo's: nothing unchecked reaches the user unless the config asks for it.
    """

    model_config = STRICT

    enabled: bool = False
    chunk_size: PositiveInt = 200
    context_size: Annotated[int, BeforeValidator(reject_bool), Field(ge=0)] = 50
    stream_first: bool = False


class RailGroup(BaseModel):
    """The checks of one direction (input or output) and how they run.

    ``on_error`` decides what a check whose backend gave no answer (down, timed out, overloaded)
    means: ``block`` (fail closed, the default) or ``allow``. An input that cannot be judged and an
    answer that is no verdict always block. ``timeout`` bounds the group's checks together.
    """

    model_config = STRICT

    flows: Annotated[list[str], BeforeValidator(lambda v: [] if v is None else v)] = Field(
        default_factory=list
    )
    # Rails tried out on a sample of the turns after they are answered; they never decide a turn
    # (rails.shadow, guardcache.rails.shadow). Input and output groups only.
    shadow_flows: Annotated[list[str], BeforeValidator(lambda v: [] if v is None else v)] = Field(
        default_factory=list
    )
    parallel: bool = False
    on_error: Literal["block", "allow"] = "block"
    # Seconds all checks of this group may take together on a turn (backend calls, retries and
    # waits included); None: each check's own timeout only. A check past it is an outage.
    timeout: PositiveFloat | None = None
    # Input rails only: on a check miss, start the main model at once, alongside the checks; a block
    # cancels it (docs/configuration.md, "Starting the main model during the input checks"). Off by default.
    during_main: bool = False
    # Output rails only: check a streamed answer in windows (see OutputStreaming).
    streaming: Annotated[OutputStreaming, BeforeValidator(null_is_empty)] = Field(
        default_factory=OutputStreaming
    )

    @field_validator("flows", "shadow_flows")
    @classmethod
    def _flows_are_known(cls, flows: list[str]) -> list[str]:
        problems: list[Problem] = []
        known = ", ".join(sorted(KNOWN_FLOWS))
        for i, text in enumerate(flows):
            try:
                ref = FlowRef.parse(text)
            except ValueError as exc:
                problems.append(((i,), str(exc)))
                continue
            if ref.name not in KNOWN_FLOWS:
                close = difflib.get_close_matches(ref.name, list(KNOWN_FLOWS), n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                problems.append(((i,), f"unknown flow {ref.name!r}{hint} (known flows: {known})"))
        if problems:
            raise FieldError("", problems=problems)
        return flows

    def flow_refs(self) -> list[FlowRef]:
        """The flows, parsed (each is known: unknown flows fail validation)."""
        return [FlowRef.parse(text) for text in self.flows]

    def shadow_refs(self) -> list[FlowRef]:
        """The shadow flows, parsed (validated as :attr:`flows` are)."""
        return [FlowRef.parse(text) for text in self.shadow_flows]


class RailsSection(BaseModel):
    """``rails:``: the input checks (before the main model) and output checks (after it).

    ``tool_input`` / ``tool_output`` (NeMo's tool rails) judge an agent's tool results / the main
    model's tool calls instead of ``input`` / ``output`` when they list flows (input flows / output
    flows: a tool result is judged as ``user_input``, a tool call as ``bot_response``).
    ``config`` holds NeMo's per-rail settings guardcache reads; ``max_input_chars`` is the longest
    text a check sends (longer text cannot be judged whole, so it is blocked as unsafe).
    ``max_image_bytes`` (decoded, per image) and ``max_images`` (per message) bound the images of a
    user message, read only when a vision rail judges them (``RailsConfig.image_limits``); past
    either, the turn is a ``ValueError`` naming the part.
    """

    model_config = STRICT

    input: Annotated[RailGroup, BeforeValidator(null_is_empty)] = Field(default_factory=RailGroup)
    output: Annotated[RailGroup, BeforeValidator(null_is_empty)] = Field(default_factory=RailGroup)
    # NeMo's tool rails: input rails judging an agent's tool results, output rails judging the
    # main model's tool calls (guardcache.rails.tools). Without flows, the input / output rails do.
    tool_input: Annotated[RailGroup, BeforeValidator(null_is_empty)] = Field(default_factory=RailGroup)
    tool_output: Annotated[RailGroup, BeforeValidator(null_is_empty)] = Field(default_factory=RailGroup)
    config: Annotated[RailSettings, BeforeValidator(null_is_empty)] = Field(default_factory=RailSettings)
    # How the groups' shadow_flows sample the turns (guardcache.config.shadow).
    shadow: Annotated[ShadowSettings, BeforeValidator(null_is_empty)] = Field(default_factory=ShadowSettings)
    max_input_chars: PositiveInt = DEFAULT_MAX_INPUT_CHARS
    max_image_bytes: PositiveInt = DEFAULT_MAX_IMAGE_BYTES
    max_images: PositiveInt = DEFAULT_MAX_IMAGES


class Instruction(BaseModel):
    """One of NeMo's ``instructions``: prompts read the first ``general`` one as
    ``{{ general_instructions }}``."""

    model_config = STRICT

    type: str
    content: str


class RailsConfig(BaseModel):
    """A whole guardrails config: models, rails and the effective prompts.

    ``prompts`` holds the user's prompts first, then every package default they do not override (per
    base task and model type). Build it with ``from_path`` or ``from_content``; construction validates
    everything, including that each flow's model type and prompt exist and each template uses only
    the placeholders its task provides.
    """

    model_config = STRICT

    models: list[ModelConfig] = Field(default_factory=list)
    rails: Annotated[RailsSection, BeforeValidator(null_is_empty)] = Field(default_factory=RailsSection)
    prompts: list[TaskPrompt] = Field(default_factory=list)
    # NeMo's, read by templates only ({{ general_instructions }}, {{ sample_conversation }}); without
    # them NeMo's defaults (guardcache.prompts.nemo_defaults), as in NeMo.
    instructions: list[Instruction] | None = Field(
        default_factory=lambda: [Instruction.model_validate(i) for i in default_instructions()], repr=False
    )
    sample_conversation: str | None = Field(default_factory=default_sample_conversation, repr=False)

    _source: str | None = PrivateAttr(default=None)
    _loaded_bytes: int = PrivateAttr(default=0)
    _ignored: tuple[str, ...] = PrivateAttr(default=())
    _prompt_cache: dict[tuple[str, str | None], TaskPrompt] = PrivateAttr(default_factory=dict)

    @classmethod
    def from_path(cls, path: str | os.PathLike[str], *, limits: ConfigLimits | None = None) -> RailsConfig:
        """Load a config folder, or a single YAML file.

        A folder is read as NeMo Guardrails reads it (``files``): every ``*.yml``/``*.yaml`` under it,
        subfolders included, merged as NeMo merges them, its ``.railsignore`` honoured. A Colang
        file NeMo would load refuses the config: guardcache does not run Colang, and a guard never
        runs fewer rails than its config declares. ``limits`` bound what the load reads (the
        defaults of :class:`~guardcache.config.files.ConfigLimits` unless given): a config over one
        is a ``ConfigError`` before the expensive work, never a hang."""
        reader = ConfigReader(limits)
        files = find_config_files(path, reader)
        if files.colang:
            raise ConfigError(colang_refusal(files, reader.limits))
        sources = merge_yaml(files, reader)
        _refuse_flows_of_skipped_colang(sources, files)
        unused = ["kb (knowledge-base documents)"] if files.knowledge_base else []
        return cls._from_sources(sources, unused, reader)

    @classmethod
    def from_content(
        cls,
        yaml_content: str | None = None,
        prompts: str | list[Any] | None = None,
        *,
        source: str = "<string>",
        prompts_source: str = "<prompts>",
        limits: ConfigLimits | None = None,
    ) -> RailsConfig:
        """Load from strings: ``yaml_content`` is a ``config.yml``; ``prompts`` is a ``prompts.yml``
        text, a YAML list of prompts, or a list of prompt mappings / ``TaskPrompt`` objects.
        ``source`` and ``prompts_source`` name them in error messages. The texts are held to the
        limits of files (``limits``, as :meth:`from_path`): a caller may pass text it did not write."""
        reader = ConfigReader(limits)
        sources = MergedSources(source)
        if yaml_content is not None:
            sources.add(reader.parse_mapping(reader.text(yaml_content, source), source), source)
        if prompts is not None:
            data = (
                reader.parse_yaml(reader.text(prompts, prompts_source), prompts_source)
                if isinstance(prompts, str)
                else prompts
            )
            if isinstance(data, list):
                data = {"prompts": data}
            if data is not None and not isinstance(data, dict):
                raise ConfigError(f"{prompts_source}: expected a list of prompts (got {show(data)})")
            sources.add(data or {}, prompts_source)
        return cls._from_sources(sources, [], reader)

    @classmethod
    def _from_sources(
        cls, sources: MergedSources, also_ignored: list[str], reader: ConfigReader
    ) -> RailsConfig:
        version = sources.data.get("colang_version")
        if version is not None and str(version).strip() not in ("1.0", "1"):
            raise ConfigError(
                f"{sources.file_of(('colang_version',))}: colang_version: {version!r}: a Colang 2 "
                "config declares its rails in Colang flows, which guardcache does not run; list the "
                "rails under rails.input.flows / rails.output.flows instead (refusing to run a config "
                "with fewer rails than it declares)"
            )
        _refuse_import_paths(sources)
        data, ignored = strip_unused_nemo_keys(sources.data)
        try:
            config = cls.model_validate(data)
        except ValidationError as exc:
            raise from_validation_error(exc, cls, sources.file_of) from None
        config._source = sources.label
        config._loaded_bytes = reader.bytes_read
        config._ignored = (*ignored, *also_ignored)
        if config._ignored:
            logger.warning(
                "%s: ignoring NeMo Guardrails settings that guardcache does not use: %s",
                sources.label,
                ", ".join(config._ignored),
            )
        for loc in config.inline_key_fields():
            # The field only, never the value.
            logger.warning("%s: %s: %s", sources.file_of(loc), format_loc(loc), INLINE_KEY_ADVICE)
        return config

    @model_validator(mode="before")
    @classmethod
    def _add_default_prompts(cls, data: Any) -> Any:
        if isinstance(data, dict):
            user = data.get("prompts")
            if user is None or isinstance(user, list):
                data = {**data, "prompts": with_defaults(user or [], default_prompts())}
        return data

    @model_validator(mode="after")
    def _cross_checks(self) -> RailsConfig:
        problems = [*self._model_problems(), *self._flow_problems(), *self._template_problems()]
        if problems:
            raise FieldError("", problems=problems)
        return self

    def _model_problems(self) -> list[Problem]:
        first: dict[str, int] = {}
        problems: list[Problem] = []
        if self.rails.input.streaming.enabled:
            problems.append((("rails", "input", "streaming"), "only output rails check a stream"))
        if self.rails.output.during_main:
            problems.append(
                (("rails", "output", "during_main"), "only input rails can run during the main model")
            )
        for section in TOOL_SECTIONS:
            group = getattr(self.rails, section)
            if group.streaming.enabled:
                problems.append(
                    (("rails", section, "streaming"), "tool rails judge whole results and calls; no stream")
                )
            if group.during_main:
                problems.append(
                    (("rails", section, "during_main"), "only rails.input can run during the main model")
                )
            if group.shadow_flows:
                problems.append(
                    (
                        ("rails", section, "shadow_flows"),
                        "shadow rails judge the user's message and the answer: list them under "
                        "rails.input.shadow_flows or rails.output.shadow_flows",
                    )
                )
        main = next((m for m in self.models if m.type == "main"), None)
        if self.rails.input.during_main and main is not None and main.side_effects:
            problems.append(
                (
                    ("rails", "input", "during_main"),
                    "the main model is marked side_effects: true: it must not start before the input "
                    "verdict (a blocked turn would still have acted)",
                )
            )
        for i, model in enumerate(self.models):
            if model.type in first:
                where = f"models[{first[model.type]}]"
                problems.append(
                    (("models", i, "type"), f"model type {model.type!r} is already configured ({where})")
                )
            first.setdefault(model.type, i)
        return problems

    def _flow_problems(self) -> list[Problem]:
        problems: list[Problem] = []
        for direction in ("input", "output", *TOOL_SECTIONS):
            seen: dict[FlowRef, int] = {}
            for i, ref in enumerate(getattr(self.rails, direction).flow_refs()):
                message = self._flow_problem(direction, ref)
                if message is None and ref in seen:
                    message = f"flow {ref.text!r} is already listed (flows[{seen[ref]}])"
                seen.setdefault(ref, i)
                if message is not None:
                    problems.append((("rails", direction, "flows", i), message))
        for direction in ("input", "output"):
            group = getattr(self.rails, direction)
            live = {ref: i for i, ref in reversed(list(enumerate(group.flow_refs())))}
            shadows: dict[FlowRef, int] = {}
            for i, ref in enumerate(group.shadow_refs()):
                message = self._flow_problem(direction, ref, "shadow_flows")
                if message is None and ref in live:
                    message = (
                        f"flow {ref.text!r} is a live rail already (flows[{live[ref]}]); a shadow rail "
                        "is the one being tried out: promoting it means moving it to flows"
                    )
                if message is None and ref in shadows:
                    message = f"flow {ref.text!r} is already listed (shadow_flows[{shadows[ref]}])"
                shadows.setdefault(ref, i)
                if message is not None:
                    problems.append((("rails", direction, "shadow_flows", i), message))
        return problems

    def _flow_problem(self, direction: str, ref: FlowRef, field: str = "flows") -> str | None:
        spec = KNOWN_FLOWS[ref.name]
        configured = ", ".join(self.model_types) or "none"
        wanted = TOOL_SECTIONS.get(direction, direction)
        if spec.direction != wanted and direction in TOOL_SECTIONS:
            what = "tool results, as input rails" if wanted == "input" else "tool calls, as output rails"
            return (
                f"flow {ref.name!r} is an {spec.direction} rail; rails.{direction} judges {what}: "
                f"use an {wanted} flow (e.g. content safety check {wanted} $model=...)"
            )
        if spec.direction != wanted:
            return f"flow {ref.name!r} is an {spec.direction} rail: move it to rails.{spec.direction}.{field}"
        for arg in spec.required_args:
            if arg not in ref.args:
                value = "<model type>" if arg == "model" else "<value>"
                return f"flow {ref.name!r} needs ${arg}={value} (configured model types: {configured})"
        extra = [f"${a}" for a in ref.args if a not in spec.accepted_args]
        if extra:
            return f"flow {ref.name!r} does not take {', '.join(extra)}"
        if ref.model_type is not None and ref.model_type not in self.model_types:
            return (
                f"flow {ref.name!r} names model type {ref.model_type!r}, which is not configured "
                f"(configured: {configured})"
            )
        model_type = self.model_type_for(ref)
        if model_type is None and spec.model_required and spec.models:
            wanted = " or ".join(repr(m) for m in spec.models)
            return f"flow {ref.name!r} runs on a model of type {wanted}: add one to models"
        if spec.backend == "classify" and self.rails.config.jailbreak_detection.url is None:
            return (
                f"flow {ref.name!r} needs rails.config.jailbreak_detection.nim_base_url "
                "(the JailbreakDetect NIM, e.g. http://localhost:8000/v1)"
            )
        if spec.prompt_task is not None and self._find_prompt(spec.prompt_task, model_type) is None:
            wanted = spec.prompt_task + (f" $model={model_type}" if model_type else "")
            return f"flow {ref.name!r} needs a prompt with task '{wanted}': add one to prompts.yml"
        return None

    def _template_problems(self) -> list[Problem]:
        variables = prompt_variables()
        problems: list[Problem] = []
        for i, prompt in enumerate(self.prompts):
            allowed = variables.get(prompt.base_task)
            if allowed is None:  # a task guardcache never renders (e.g. NeMo's generate_user_intent)
                continue
            if prompt.content is not None:
                found = _template_problems(prompt, prompt.content, allowed)
                problems += [(("prompts", i, "content"), m) for m in found]
            for j, message in enumerate(prompt.messages or ()):
                loc = ("prompts", i, "messages", j, "content")
                if message.type is None:  # NeMo's "{{ history | to_chat_messages }}" entries
                    problems.append(
                        (
                            loc,
                            "a message expression (a bare string) expands a conversation history, "
                            "which guard checks do not have: give each message a type and a content",
                        )
                    )
                else:
                    problems += [(loc, m) for m in _template_problems(prompt, message.content, allowed)]
        return problems

    def template_settings(self) -> dict[str, Any]:
        """The settings every template of this config reads by NeMo's names: ``rails.config``'s
        (``reasoning_enabled``, ``config``...), ``general_instructions`` and ``sample_conversation``
        (``_two_turns``). ``bot_thinking`` and ``relevant_chunks`` keep their defaults (None, "")."""
        instructions = [i.model_dump() for i in self.instructions] if self.instructions is not None else None
        return {
            **self.rails.config.template_settings(),
            "general_instructions": general_instructions(instructions),
            "sample_conversation": self.sample_conversation,
            "sample_conversation_two_turns": self.sample_conversation,
        }

    def inline_key_fields(self) -> list[Loc]:
        """Where the config writes an API key itself (``models[i].parameters.api_key``,
        ``rails.config.jailbreak_detection.api_key``): the load warning names them, never a value."""
        found: list[Loc] = [
            ("models", i, "parameters", model.inline_key_field)
            for i, model in enumerate(self.models)
            if model.inline_key_field is not None
        ]
        if self.rails.config.jailbreak_detection.has_inline_key:
            found.append(("rails", "config", "jailbreak_detection", "api_key"))
        return found

    def image_rails(self) -> tuple[list[str], list[str]]:
        """The rails that read the user's message, as written in ``flows``, in two lists: those that
        judge its images too (vision rails: ``config.prompts.judges_images``) and those that judge
        its text only (every other prompt, topic control, the JailbreakDetect NIM)."""
        vision: list[str] = []
        text_only: list[str] = []
        for group in (self.rails.input, self.rails.output):
            for ref in group.flow_refs():
                spec = KNOWN_FLOWS[ref.name]
                if "user_input" not in spec.variables:
                    continue
                sees = spec.prompt_task is not None and judges_images(
                    spec, self.prompt_for(spec.prompt_task, self.model_type_for(ref))
                )
                (vision if sees else text_only).append(ref.text)
        return vision, text_only

    def image_limits(self) -> ImageLimits | None:
        """What images a user message may carry (``rails.max_image_bytes``, ``rails.max_images``),
        or None: images are refused. They are accepted only when a vision rail judges them and no
        rail that reads the message judges its text only (that rail cannot judge an image, and
        must not judge a message with its images left out)."""
        vision, text_only = self.image_rails()
        if not vision or text_only:
            return None
        return ImageLimits(self.rails.max_image_bytes, self.rails.max_images)

    def flows_on(self, model_type: str) -> list[str]:
        """The flows (as written, input first) whose checks run on the model of ``model_type``:
        what its verdict cache holds (for ``main``, the self checks that have no model of their
        own; ``rails/caches.py`` builds ``main`` a cache only when there is one). Shadow flows
        count: their verdicts are cached too, under namespaces of their own."""
        return [
            ref.text
            for group in self.rail_groups()
            for ref in (*group.flow_refs(), *group.shadow_refs())
            if self.model_type_for(ref) == model_type
        ]

    def rail_groups(self) -> tuple[RailGroup, ...]:
        """Every group of rails the config runs: input, output, and NeMo's tool rails
        (``tool_input``, ``tool_output``)."""
        rails = self.rails
        return (rails.input, rails.output, rails.tool_input, rails.tool_output)

    def model_type_for(self, ref: FlowRef) -> str | None:
        """The model type a flow runs on: its ``$model=``, else the first configured of the types
        its spec names (``self check input``: ``self_check_input``, else ``main``)."""
        if ref.model_type is not None:
            return ref.model_type
        spec: FlowSpec = KNOWN_FLOWS[ref.name]
        return next((m for m in spec.models if m in self.model_types), None)

    @property
    def source(self) -> str | None:
        """The file or folder this config was loaded from (``"<string>"`` for from_content)."""
        return self._source

    @property
    def loaded_bytes(self) -> int:
        """The bytes of config text read to load this config (what ``ConfigLimits.total_bytes``
        counts): ``guardcache serve`` adds them up over a folder of configs."""
        return self._loaded_bytes

    @property
    def ignored_keys(self) -> tuple[str, ...]:
        """NeMo settings (dotted paths), and a ``kb`` folder's documents, accepted but not used."""
        return self._ignored

    @property
    def model_types(self) -> list[str]:
        """The configured model types, in file order."""
        return [model.type for model in self.models]

    def with_base_urls(self, urls: dict[str, str]) -> RailsConfig:
        """A copy whose models (by type) call other endpoints: staging, a local emulator, a test server.

        Only ``parameters.base_url`` changes; everything else, including cache and prompt settings, is
        kept, so the copy computes the same cache namespaces. The key ``jailbreak_detection`` also
        points ``rails.config.jailbreak_detection`` at ``<url>/classify`` (a JailbreakDetect NIM's
        route), whether or not a model of that type is configured.
        """
        jailbreak = urls.get(JAILBREAK_KEY)
        unknown = sorted(set(urls) - set(self.model_types) - {JAILBREAK_KEY})
        if unknown:
            raise ConfigError(
                f"{self._source or '<config>'}: with_base_urls: no model of type {', '.join(unknown)} "
                f"(configured: {', '.join(self.model_types) or 'none'})"
            )
        models = [m.with_base_url(urls[m.type]) if m.type in urls else m for m in self.models]
        update: dict[str, Any] = {"models": models}
        if jailbreak is not None:
            settings = self.rails.config
            detection = settings.jailbreak_detection.model_copy(
                update={"nim_base_url": jailbreak, "nim_server_endpoint": "classify"}
            )
            rails = self.rails.model_copy(
                update={"config": settings.model_copy(update={"jailbreak_detection": detection})}
            )
            update["rails"] = rails
        copy = self.model_copy(update=update)
        copy._prompt_cache = {}
        return copy

    def endpoint_types(self) -> list[str]:
        """What :meth:`with_base_urls` can point elsewhere: the model types, and
        ``jailbreak_detection`` when a JailbreakDetect NIM is configured."""
        types = list(self.model_types)
        if self.rails.config.jailbreak_detection.url is not None and JAILBREAK_KEY not in types:
            types.append(JAILBREAK_KEY)
        return types

    def model(self, type: str) -> ModelConfig:
        """The model of this type; a ``ConfigError`` listing the configured types if there is none."""
        for model in self.models:
            if model.type == type:
                return model
        configured = ", ".join(self.model_types) or "none"
        raise ConfigError(
            f"{self._source or '<config>'}: no model of type {type!r} is configured "
            f"(configured: {configured})"
        )

    def prompt_for(self, task: str, model_type: str | None = None) -> TaskPrompt:
        """The prompt for ``task`` (``content_safety_check_input``, or with ``$model=``) run on the
        model of ``model_type``: the user's override if any, else the package default."""
        base, typed = split_task(task)
        key = (base, typed or model_type)
        found = self._prompt_cache.get(key)
        if found is None:
            found = self._find_prompt(task, model_type)
            if found is None:
                have = ", ".join(sorted({p.task for p in self.prompts})) or "none"
                raise ConfigError(
                    f"{self._source or '<config>'}: no prompt for task {base!r} and model type "
                    f"{key[1]!r} (prompts exist for: {have})"
                )
            self._prompt_cache[key] = found
        return found

    def _find_prompt(self, task: str, model_type: str | None) -> TaskPrompt | None:
        typed = split_task(task)[1] or model_type
        model = next((m for m in self.models if m.type == typed), None)
        return select_prompt(
            self.prompts,
            task,
            model_type,
            engine=model.engine if model else None,
            model=model.model if model else None,
        )


def colang_refusal(files: ConfigFiles, limits: ConfigLimits | None = None) -> str:
    """The load error for a config with Colang files NeMo would load: it names each file and the
    flows it defines, and each flow the YAML lists that one of them defines (its YAML read within
    ``limits``)."""
    listed: list[str] = []
    reader = ConfigReader(limits)
    for path in files.yaml:
        try:
            data = reader.read_mapping(path)
        except ConfigError:  # the Colang refusal stands; this file's own error comes once it is gone
            continue
        for loc, flow in listed_flows(data):
            owners = [c.name for c in files.colang if c.defines(flow)]
            if owners:
                known = "" if flow_base_name(flow) in KNOWN_FLOWS else " only"
                listed.append(f"{path}: {format_loc(loc)}: {flow!r} is defined{known} in {', '.join(owners)}")
    message = (
        f"{files.label}: Colang files declare rails that guardcache does not run: "
        f"{'; '.join(c.describe() for c in files.colang)}."
    )
    if listed:
        message += f" Flows the config lists that Colang defines: {'; '.join(listed)}."
    return (
        f"{message} guardcache does not run Colang: it runs the rails listed under rails.input.flows "
        "and rails.output.flows that it implements (README: 'Coming from NeMo Guardrails'). Remove "
        "the .co files, or name them in a .railsignore (NeMo "
        "Guardrails then skips them too), and list guardcache's flows there (refusing to run a config "
        "with fewer rails than it declares)"
    )


def _template_problems(prompt: TaskPrompt, template: str, allowed: frozenset[str]) -> list[str]:
    """A template's problems, each naming its prompt (the caller adds the file and the field)."""
    fixed = fixed_variables(allowed)
    return [f"prompt {prompt.task!r}: {m}" for m in template_problems(template, allowed, fixed=fixed)]


def _refuse_import_paths(sources: MergedSources) -> None:
    """``import_paths`` makes NeMo load other config packages (their Colang flows, YAML and Python
    actions) into this one; guardcache can load none of that, and without it the config would run
    with fewer rails than it declares. An empty list imports nothing and is accepted."""
    paths = sources.data.get("import_paths")
    if paths is None or paths == []:
        return
    listed = (
        ", ".join(repr(p) for p in paths[:3]) + (", ..." if len(paths) > 3 else "")
        if isinstance(paths, list)
        else show(paths)
    )
    raise ConfigError(
        f"{sources.file_of(('import_paths',))}: import_paths: NeMo Guardrails would import the config "
        f"packages {listed} (their Colang flows, YAML and Python actions) into this config; guardcache "
        "cannot import NeMo config packages: it runs no Colang and no Python actions, and running "
        "without them would run fewer rails than the config declares. Copy the rails you need into "
        "this config's rails.input.flows / rails.output.flows (and their models and prompts) and "
        "remove import_paths"
    )


def _refuse_flows_of_skipped_colang(sources: MergedSources, files: ConfigFiles) -> None:
    """A listed flow guardcache does not know, defined in a Colang file that is not loaded (excluded by
    ``.railsignore``, or under ``kb``): name that file rather than call the flow unknown."""
    for loc, flow in listed_flows(sources.data):
        if flow_base_name(flow) in KNOWN_FLOWS:
            continue
        for colang, why in files.skipped_colang:
            if colang.defines(flow):
                raise ConfigError(
                    f"{sources.file_of(loc)}: {format_loc(loc)}: flow {flow!r} is defined only in "
                    f"Colang, in {colang.name}, which is not loaded ({why}; NeMo Guardrails does not "
                    "load it either). guardcache does not run Colang flows: list a flow guardcache "
                    "runs instead (refusing to run a config with fewer rails than it declares)"
                )


__all__ = ["Instruction", "OutputStreaming", "RailGroup", "RailsConfig", "RailsSection", "colang_refusal"]
