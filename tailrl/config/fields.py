"""`opt`: a config field with its default and the help text a user reads in `tailrl config show`."""

from __future__ import annotations

import dataclasses
from dataclasses import field
from typing import Any


def opt(default: Any = dataclasses.MISSING, help: str = "", factory: Any = dataclasses.MISSING) -> Any:
    """A dataclass field documented in code: `default` (or `factory` for mutable defaults) and `help`."""
    if not help:
        raise ValueError("every config field needs a help string")
    if factory is not dataclasses.MISSING:
        return field(default_factory=factory, metadata={"help": help})
    return field(default=default, metadata={"help": help})


def help_of(f: dataclasses.Field) -> str:
    return f.metadata.get("help", "")
