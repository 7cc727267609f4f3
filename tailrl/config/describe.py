"""`tailrl config show [SECTION]`: every key of a config tree with its type, value and help text.

    describe(Config())                    # all sections, defaults
    describe(resolved_cfg, "algo")        # one section of a config with overrides / a preset applied
"""

from __future__ import annotations

import dataclasses
import typing

from tailrl.config.fields import choices_of, help_of
from tailrl.errors import UserError


def _type_name(tp) -> str:
    if isinstance(tp, type):
        return tp.__name__
    return str(tp).replace("typing.", "")


def rows(cfg, prefix: str = "") -> list[tuple[str, str, str, str]]:
    """(dotted key, type, value, help) for every leaf key of a dataclass tree; nested sections recurse."""
    out = []
    hints = typing.get_type_hints(type(cfg))
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        key = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(value):
            out += rows(value, key + ".")
        else:
            out.append((key, _type_name(hints[f.name]), repr(value), _with_choices(f)))
    return out


def _with_choices(f: dataclasses.Field) -> str:
    """The help text, followed by the key's choices (from its registry) unless the help names them all."""
    text, names = help_of(f), choices_of(f)
    if names and not all(n in text for n in names):
        text += f" [choices: {' | '.join(names)}]"
    return text


def section_of(cfg, section: str):
    """The sub-tree at a dotted section name ('engine.spec'), or UserError naming the sections."""
    node = cfg
    for part in section.split(".") if section else []:
        names = [f.name for f in dataclasses.fields(node) if dataclasses.is_dataclass(getattr(node, f.name))]
        if part not in names:
            raise UserError(f"unknown config section '{section}'; sections: {', '.join(names)}")
        node = getattr(node, part)
    return node


def describe(cfg, section: str = "") -> str:
    """A readable table of `section` (all sections when empty): one key per line with type, value and help;
    each section headed by its own help."""
    node = section_of(cfg, section)
    prefix = section + "." if section else ""
    table = rows(node, prefix)
    width = max(len(k) for k, *_ in table)
    twidth = max(len(t) for _, t, _, _ in table)
    vwidth = min(24, max(len(v) for *_, v, _ in table))
    lines, current = [], None
    for key, tp, value, help_text in table:
        head = key.rsplit(".", 1)[0] if "." in key else ""
        if head != current:
            current = head
            doc = _section_help(cfg, head)
            lines.append(f"\n[{head or 'config'}]" + (f"  {doc}" if doc else ""))
        lines.append(f"  {key:<{width}}  {tp:<{twidth}}  {value:<{vwidth}}  {help_text}")
    return "\n".join(lines).lstrip("\n")


def _section_help(cfg, dotted: str) -> str:
    """The help of the field holding section `dotted` (e.g. 'engine.spec' -> "speculative rollout")."""
    if not dotted:
        return ""
    *parents, name = dotted.split(".")
    node = section_of(cfg, ".".join(parents))
    f = next(f for f in dataclasses.fields(node) if f.name == name)
    return help_of(f)
