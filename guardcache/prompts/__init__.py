"""Rendering prompt templates (NeMo Guardrails' Jinja syntax, sandboxed, single pass), and the
NemoGuard prompts shipped as data (``*.yml`` here).

Which prompt a check uses (the ``prompts.yml`` schema, the defaults, the user's overrides) is the
config's business: ``guardcache.config.prompts``. This package imports nothing of the config.
"""

from guardcache.prompts.jinja import (
    KNOWN_SETTINGS,
    CompiledTemplate,
    Setting,
    Settings,
    TemplateCompileError,
    TemplateRenderError,
    compile_template,
    register_setting,
)
from guardcache.prompts.render import (
    RenderableMessage,
    RenderablePrompt,
    fingerprint,
    placeholders,
    render,
    render_messages,
    single_variable,
    static_prefix,
    takes_image_parts,
    template_problems,
)

__all__ = [
    "KNOWN_SETTINGS",
    "CompiledTemplate",
    "RenderableMessage",
    "RenderablePrompt",
    "Setting",
    "Settings",
    "TemplateCompileError",
    "TemplateRenderError",
    "compile_template",
    "fingerprint",
    "placeholders",
    "register_setting",
    "render",
    "render_messages",
    "single_variable",
    "static_prefix",
    "takes_image_parts",
    "template_problems",
]
