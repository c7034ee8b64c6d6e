"""Turning validation failures into ``ConfigError`` messages an operator can act on.

Every config problem is reported as ``<file>: <field path>: <what is wrong> (got <value>)``, e.g.
``config.yml: models[1].cache.maxsize: must be greater than 0 (got 0)``. pydantic's own messages
("Input should be greater than 0") name neither the file nor the path in YAML terms, so this module
rewrites them; validators raise ``FieldError`` to report a problem at a precise path of their own.
"""

from __future__ import annotations

import difflib
import types
from collections.abc import Callable, Iterable, Sequence
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import AliasChoices, BaseModel, ValidationError
from pydantic_core import ErrorDetails

from guardcache.errors import ConfigError

Loc = tuple[str | int, ...]
Problem = tuple[Loc, str]


class FieldError(ConfigError):
    """One or more problems at field paths, raised from inside a validator.

    Each path is relative to where pydantic reports the validator's error (a model validator of the
    top-level config sees absolute paths), so a nested model can point at one of its own keys.
    """

    def __init__(self, message: str, loc: Loc = (), *, problems: Sequence[Problem] = ()) -> None:
        self.problems: list[Problem] = list(problems) or [(tuple(loc), message)]
        super().__init__("; ".join(f"{format_loc(p) or '<top>'}: {m}" for p, m in self.problems))


def format_loc(loc: Iterable[str | int]) -> str:
    """``("models", 1, "cache", "maxsize")`` -> ``"models[1].cache.maxsize"``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def show(value: Any) -> str:
    """A short, safe rendering of a bad value for a message (never a whole mapping or list)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def config_error(problems: Iterable[Problem], file_of: Callable[[Loc], str]) -> ConfigError:
    """One ``ConfigError`` with a line per problem: ``<file>: <path>: <message>``."""
    lines = []
    for loc, message in problems:
        path = format_loc(loc)
        lines.append(f"{file_of(loc)}: {path}: {message}" if path else f"{file_of(loc)}: {message}")
    return ConfigError("\n".join(lines))


def from_validation_error(
    exc: ValidationError, schema: type[BaseModel], file_of: Callable[[Loc], str]
) -> ConfigError:
    """Rewrite a pydantic ``ValidationError`` of ``schema`` as a ``ConfigError``."""
    problems: list[Problem] = []
    for err in exc.errors():
        problems.extend(describe(err, schema))
    return config_error(problems, file_of)


def describe(err: ErrorDetails, schema: type[BaseModel]) -> list[Problem]:
    """The (path, message) pairs for one pydantic error, in the words of the config file."""
    loc: Loc = tuple(err["loc"])
    kind = err["type"]
    ctx = err.get("ctx") or {}
    got = f" (got {show(err.get('input'))})"
    if kind in ("value_error", "assertion_error"):
        error = ctx.get("error")
        if isinstance(error, FieldError):
            return [(loc + p, m) for p, m in error.problems]
        return [(loc, str(error) if error is not None else err["msg"])]
    if kind == "extra_forbidden":
        return [(loc, _unknown_key(schema, loc))]
    simple = {
        "missing": "required key is missing",
        "greater_than": f"must be greater than {ctx.get('gt')}{got}",
        "greater_than_equal": f"must be at least {ctx.get('ge')}{got}",
        "less_than": f"must be less than {ctx.get('lt')}{got}",
        "less_than_equal": f"must be at most {ctx.get('le')}{got}",
        "float_parsing": f"expected a number{got}",
        "float_type": f"expected a number{got}",
        "finite_number": f"expected a finite number{got}",
        "int_parsing": f"expected a whole number{got}",
        "int_type": f"expected a whole number{got}",
        "int_from_float": f"expected a whole number{got}",
        "bool_parsing": f"expected true or false{got}",
        "bool_type": f"expected true or false{got}",
        "string_type": f"expected a string{got}",
        "string_too_short": f"must not be empty{got}",
        "list_type": f"expected a list{got}",
        "tuple_type": f"expected a list{got}",
        "dict_type": f"expected a mapping of keys{got}",
        "model_type": f"expected a mapping of keys{got}",
        "model_attributes_type": f"expected a mapping of keys{got}",
        "literal_error": f"expected one of {ctx.get('expected')}{got}",
    }
    return [(loc, simple.get(kind, f"{err['msg']}{got}"))]


def _unknown_key(schema: type[BaseModel], loc: Loc) -> str:
    key = loc[-1] if loc else ""
    owner = _model_at(schema, loc[:-1])
    if owner is None:
        return "unknown key"
    names: list[str] = []
    for name, info in owner.model_fields.items():
        aliases = _aliases(name, info.validation_alias)
        if key in aliases:
            return f"{key!r} and {name!r} are two names for one setting; keep only one"
        names.append(name if len(aliases) == 1 else f"{name} (or {', '.join(aliases[1:])})")
    choices = [a for name, info in owner.model_fields.items() for a in _aliases(name, info.validation_alias)]
    close = difflib.get_close_matches(str(key), choices, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"unknown key{hint} (allowed: {', '.join(names)})"


def _aliases(name: str, alias: object) -> list[str]:
    found = [name]
    if isinstance(alias, AliasChoices):
        found += [c for c in alias.choices if isinstance(c, str) and c != name]
    elif isinstance(alias, str) and alias != name:
        found.append(alias)
    return found


def _model_at(schema: type[BaseModel], loc: Loc) -> type[BaseModel] | None:
    """The model class that validates the mapping at ``loc`` (or ``None`` if it is not a model)."""
    tp: Any = schema
    for part in loc:
        tp = _unwrap(tp)
        if isinstance(part, int):
            args = get_args(tp)
            if get_origin(tp) not in (list, tuple) or not args:
                return None
            tp = args[0]
        elif isinstance(tp, type) and issubclass(tp, BaseModel):
            tp = next(
                (
                    info.annotation
                    for name, info in tp.model_fields.items()
                    if part in _aliases(name, info.validation_alias)
                ),
                None,
            )
            if tp is None:
                return None
        else:
            return None
    tp = _unwrap(tp)
    return tp if isinstance(tp, type) and issubclass(tp, BaseModel) else None


def _unwrap(tp: Any) -> Any:
    """Strip ``Annotated[...]`` and ``X | None`` down to ``X``."""
    while True:
        origin = get_origin(tp)
        if origin is Annotated:
            tp = get_args(tp)[0]
        elif origin in (Union, types.UnionType):
            members = [a for a in get_args(tp) if a is not type(None)]
            if len(members) != 1:
                return tp
            tp = members[0]
        else:
            return tp


__all__ = [
    "FieldError",
    "Loc",
    "Problem",
    "config_error",
    "describe",
    "format_loc",
    "from_validation_error",
    "show",
]
