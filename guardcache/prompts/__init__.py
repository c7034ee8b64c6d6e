"""Task prompt templates shipped as data (YAML), the user's overrides, and their rendering."""

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
from guardcache.prompts.loader import default_prompts, select_prompt, with_defaults
from guardcache.prompts.render import (
    fingerprint,
    placeholders,
    render,
    render_messages,
    static_prefix,
    template_problems,
)
from guardcache.prompts.templates import PromptMessage, TaskPrompt, split_task

__all__ = [
    "KNOWN_SETTINGS",
    "CompiledTemplate",
    "PromptMessage",
    "Setting",
    "Settings",
    "TaskPrompt",
    "TemplateCompileError",
    "TemplateRenderError",
    "compile_template",
    "default_prompts",
    "fingerprint",
    "placeholders",
    "register_setting",
    "render",
    "render_messages",
    "select_prompt",
    "split_task",
    "static_prefix",
    "template_problems",
    "with_defaults",
]
