"""An API key in a config: named by an environment variable, or written in the file.

Why one module: NeMo configs write a key in two places (a model's ``parameters.api_key`` and its
aliases, and ``rails.config.jailbreak_detection.api_key``), and both need the same rules. A written
key is a one-line string whose value no error shows; it may not be given beside ``api_key_env_var``;
it is taken out of the data before anything else reads it (no repr, error, request body or cache
namespace can show it), kept as a ``SecretStr`` and named in the load warning; ``api_key()`` reads
it back, else the variable read at call time, so a rotated key is picked up without a reload.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

from pydantic import BaseModel, ModelWrapValidatorHandler, PrivateAttr, SecretStr, model_validator

from guardcache.config.errors import FieldError


def inline_secret(value: Any, loc: tuple[str | int, ...]) -> str | None:
    """An API key written in a config file, checked: a one-line string (``None``: not given).

    Error messages never show the value (it is a secret, or a secret's typo)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise FieldError(f"expected the key as a string (got {_kind(value)}; the value is not shown)", loc)
    if not value.strip() or any(ch in value for ch in "\r\n\0"):
        raise FieldError("expected the key as one line of text, not empty (the value is not shown)", loc)
    return value


def written_key(
    holder: Mapping[str, Any], names: Iterable[str], where: tuple[str, ...] = ()
) -> tuple[str, str] | None:
    """The key written in ``holder`` under one of ``names``, as (name, value), each checked by
    :func:`inline_secret`; None when none is given. ``where`` is the path to ``holder``, for errors.

    Raises:
        FieldError: a value that is no key, or two names holding different keys (never shown).
    """
    keys = sorted(set(names) & holder.keys())
    given = {k: v for k in keys if (v := inline_secret(holder[k], (*where, k))) is not None}
    if len(set(given.values())) > 1:
        raise FieldError(
            f"the API key is given twice, with different values ({', '.join(given)}); keep one",
            (*where, list(given)[-1]),
        )
    return next(iter(given.items()), None)


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    return type(value).__name__


class KeyHolder(BaseModel):
    """A config section that holds an API key: ``api_key_env_var``, or a key written in the file.

    A subclass says where a written key is (``_key_mapping``: the name of the mapping that holds it,
    None for the section itself; ``_key_names``: the keys that may hold it) and which variable to
    read without one (:meth:`_key_variable`).
    """

    _key_mapping: ClassVar[str | None] = None
    _key_names: ClassVar[frozenset[str]] = frozenset({"api_key"})

    # The key written in the file, kept out of every repr; ``api_key()`` reads it. Copies keep it.
    _inline_key: SecretStr | None = PrivateAttr(default=None)
    _inline_key_field: str | None = PrivateAttr(default=None)

    @model_validator(mode="wrap")
    @classmethod
    def _take_out_the_inline_key(cls, data: Any, handler: ModelWrapValidatorHandler[Any]) -> Any:
        """Move a written key out of the data before anything else reads it."""
        found: tuple[str, str] | None = None
        holder = data.get(cls._key_mapping) if isinstance(data, dict) and cls._key_mapping else data
        if isinstance(data, dict) and isinstance(holder, dict) and cls._key_names & holder.keys():
            where = (cls._key_mapping,) if cls._key_mapping else ()
            found = written_key(holder, cls._key_names, where)
            if found is not None and data.get("api_key_env_var") is not None:
                raise FieldError(
                    f"the API key is given twice ({'.'.join((*where, found[0]))} and api_key_env_var); "
                    "keep api_key_env_var",
                    (*where, found[0]),
                )
            kept = {k: v for k, v in holder.items() if k not in cls._key_names}
            data = {**data, cls._key_mapping: kept} if cls._key_mapping else kept
        section = handler(data)
        if found is not None:
            section._inline_key_field, section._inline_key = found[0], SecretStr(found[1])
        return section

    @property
    def inline_key_field(self) -> str | None:
        """The key's name (``api_key``, or ``openai_api_key`` / ``nvidia_api_key`` in a model's
        ``parameters``) when the key is written in the config, for the load warning; None when it
        is not. Never the value."""
        return self._inline_key_field

    @property
    def has_inline_key(self) -> bool:
        """Whether the key is written in the config file, for the load warning."""
        return self._inline_key is not None

    def _key_variable(self) -> str | None:
        """The environment variable the key is read from when none is written (None: no key)."""
        raise NotImplementedError

    def api_key(self) -> str | None:
        """The API key: the one written in the file if any, else the variable :meth:`_key_variable`
        names, read NOW (keys rotate; None if unset or empty)."""
        if self._inline_key is not None:
            return self._inline_key.get_secret_value()
        name = self._key_variable()
        return (os.environ.get(name) or None) if name is not None else None


__all__ = ["KeyHolder", "inline_secret", "written_key"]
