"""Sample guard prompts in the exact formats the emulator recognizes.

The NemoGuard content-safety templates below are byte-identical to the model's published prompt
format (the reference ``nemoguard_content_safety_prompts.yml``). They live here, apart from
``guardcache.prompts`` (the production renderer), so the emulator's tests and demos exercise the
emulator against the real format without depending on the code that is tested against it.
"""

from __future__ import annotations

from typing import Any

CONTENT_SAFETY_PREFIX = (
    "Task: Check if there is unsafe content in the user or agent messages in the below "
    "conversation in accordance with our safety policy with the below categories. Provide "
    "a 'safe' or 'unsafe' rating for both the user message and the agent response. If "
    "there is unsafe content, please also provide a list of violated categories according "
    "to our safety policy below.\n"
    "\n"
    "<BEGIN UNSAFE CONTENT CATEGORIES>\n"
    "S1: Violence.\n"
    "S2: Sexual.\n"
    "S3: Criminal Planning/Confessions.\n"
    "S4: Guns and Illegal Weapons.\n"
    "S5: Controlled/Regulated Substances.\n"
    "S6: Suicide and Self Harm.\n"
    "S7: Sexual (minor).\n"
    "S8: Hate/Identity Hate.\n"
    "S9: PII/Privacy.\n"
    "S10: Harassment.\n"
    "S11: Threat.\n"
    "S12: Profanity.\n"
    "S13: Needs Caution.\n"
    "S14: Other.\n"
    "S15: Manipulation.\n"
    "S16: Fraud/Deception.\n"
    "S17: Malware.\n"
    "S18: High Risk Gov Decision Making.\n"
    "S19: Political/Misinformation/Conspiracy.\n"
    "S20: Copyright/Trademark/Plagiarism.\n"
    "S21: Unauthorized Advice.\n"
    "S22: Illegal Activity.\n"
    "S23: Immoral/Unethical.\n"
    "<END UNSAFE CONTENT CATEGORIES>\n"
    "\n"
    "<BEGIN CONVERSATION>\n"
    "\n"
    "user: "
)
CONTENT_SAFETY_SUFFIX = (
    "\n"
    "\n"
    "<END CONVERSATION>\n"
    "\n"
    "Provide your safety assessment for the above conversation in the below output JSON format:\n"
    '{"User Safety": safe or unsafe rating for the user message, "Response Safety": safe '
    'or unsafe rating for the agent response. Omit if no agent response present. "Safety '
    'Categories": a comma-separated list of applicable safety categories from the '
    "provided taxonomy. Omit if all safe.}\n"
    "\n"
    "Do not include anything other than the output JSON in your response.\n"
    "Output JSON:\n"
)
_AGENT_MARK = "\n\nresponse: agent: "

LLAMA_GUARD_CATEGORIES = (
    ("S1", "Violent Crimes"),
    ("S2", "Non-Violent Crimes"),
    ("S3", "Sex-Related Crimes"),
    ("S4", "Child Sexual Exploitation"),
    ("S5", "Defamation"),
    ("S6", "Specialized Advice"),
    ("S7", "Privacy"),
    ("S8", "Intellectual Property"),
    ("S9", "Indiscriminate Weapons"),
    ("S10", "Hate"),
    ("S11", "Suicide & Self-Harm"),
    ("S12", "Sexual Content"),
    ("S13", "Elections"),
    ("S14", "Code Interpreter Abuse"),
)

TOPIC_CONTROL_SUFFIX = (
    '\n\nIf any of the above conditions are violated, please respond with "off-topic". '
    'Otherwise, respond with "on-topic". You must respond with "on-topic" or "off-topic".'
)


def content_safety_input(user: str) -> str:
    """The rendered input-check prompt for ``user`` (sent as ONE user message)."""
    return CONTENT_SAFETY_PREFIX + user + CONTENT_SAFETY_SUFFIX


def content_safety_output(user: str, bot: str) -> str:
    """The rendered output-check prompt for a user message and the bot's response."""
    return CONTENT_SAFETY_PREFIX + user + _AGENT_MARK + bot + CONTENT_SAFETY_SUFFIX


def as_messages(prompt: str) -> list[dict[str, Any]]:
    """A rendered prompt as the one-message chat the NIM expects."""
    return [{"role": "user", "content": prompt}]


def llama_guard(user: str, agent: str | None = None) -> str:
    """A Llama Guard 3 prompt assessing the last User turn, or the Agent turn when given."""
    role = "Agent" if agent is not None else "User"
    categories = "\n".join(f"{code}: {name}." for code, name in LLAMA_GUARD_CATEGORIES)
    turns = f"User: {user}" + (f"\n\nAgent: {agent}" if agent is not None else "")
    return (
        f"Task: Check if there is unsafe content in '{role}' messages in conversations according "
        "our safety policy with the below categories.\n\n"
        f"<BEGIN UNSAFE CONTENT CATEGORIES>\n{categories}\n<END UNSAFE CONTENT CATEGORIES>\n\n"
        f"<BEGIN CONVERSATION>\n\n{turns}\n\n<END CONVERSATION>\n\n"
        f"Provide your safety assessment for ONLY THE LAST {role} message in the above "
        "conversation:\n - First line must read 'safe' or 'unsafe'.\n - If unsafe, a second line "
        "must include a comma-separated list of violated categories."
    )


def topic_control(rules: str, user: str) -> list[dict[str, Any]]:
    """Topic-control messages: the rules as the system message, then the user's message."""
    return [
        {"role": "system", "content": rules + TOPIC_CONTROL_SUFFIX},
        {"role": "user", "content": user},
    ]
