"""`opt`: a config field with its default, the help text a user reads in `tailrl config show`, and for a
key that names a variant, its valid choices — checked when a section is made, so a bad name fails when
the config loads (before any model), with the valid names.

    attention: str = opt("auto", "...", choices=("auto", "torch", "triton"))
    sampler: str = opt("blocked", "...", choices="tailrl.engine.sampling.keyed:SAMPLERS")

Choices are a tuple, or "module:NAME" naming a Registry (or a tuple / dict, or a function returning the
names) that lives above the config layer: the registries are the single source of the names, and the
config imports their modules only to check a value other than the default.
"""

from __future__ import annotations

import dataclasses
import importlib
from dataclasses import field
from typing import Any, ClassVar

from tailrl.errors import UserError


def opt(default: Any = dataclasses.MISSING, help: str = "", factory: Any = dataclasses.MISSING,
        choices: tuple[str, ...] | str | None = None) -> Any:
    """A dataclass field documented in code: `default` (or `factory` for mutable defaults), `help`, and
    optionally the valid `choices` of a variant key (a tuple, or "module:NAME" of a registry)."""
    if not help:
        raise ValueError("every config field needs a help string")
    meta = {"help": help, "choices": choices}
    if factory is not dataclasses.MISSING:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


def help_of(f: dataclasses.Field) -> str:
    return f.metadata.get("help", "")


def choices_of(f: dataclasses.Field) -> tuple[str, ...] | None:
    """The valid names of a variant key (None: any value)."""
    c = f.metadata.get("choices")
    if isinstance(c, str):
        module, name = c.split(":")
        # lazy: the registries live above the config layer (engine, algo, control, data, speculative)
        obj = getattr(importlib.import_module(module), name)
        c = obj() if callable(obj) else obj
    return tuple(c) if c is not None else None


class Section:
    """Base of the config sections: checks every choice key when an instance is made. `key` is the
    section's dotted name, for the messages ("engine" -> "unknown engine.attention 'foo'")."""

    key: ClassVar[str] = ""

    def __post_init__(self):
        check_choices(self)


def check_choices(section) -> None:
    """UserError naming the valid choices for a choice key whose value is not one (defaults are valid by
    construction: tests/test_config.py checks them, and skipping them keeps registries unimported)."""
    for f in dataclasses.fields(section):
        value = getattr(section, f.name)
        if f.metadata.get("choices") is None or value == f.default or value is None:
            continue
        names = choices_of(f)
        for v in value if isinstance(value, tuple) else (value,):
            if v not in names:
                where = f"{section.key}.{f.name}" if section.key else f.name
                raise UserError(f"unknown {where} '{v}'; valid: {', '.join(names)}")
