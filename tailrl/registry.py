"""One registry style for every pluggable variant: rewards, group-size controllers, drafters, advantage
estimators, loss aggregations, PODS down-sampling rules, speculation modes.

    ADVANTAGES: Registry[AdvantageFn] = Registry("algo.advantage")

    @ADVANTAGES.register("grpo")
    def grpo(scores, groups): ...

    fn = ADVANTAGES.get(cfg.algo.advantage)   # UserError naming the valid choices when unknown

A variant is looked up once (never a string branch in a hot loop). Registering a second, different
object under a taken name is a bug and raises; re-registering the same function (a module reload) is
allowed. The type parameter is the variant's Protocol, so a checker sees what a registered entry must be.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from tailrl.errors import UserError

T = TypeVar("T")


def _identity(obj) -> tuple[str, str]:
    return getattr(obj, "__module__", ""), getattr(obj, "__qualname__", repr(obj))


class Registry(Generic[T]):
    def __init__(self, setting: str):
        self.setting = setting  # the config key that names an entry, for error messages
        self._entries: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: add the decorated object under `name`."""

        def add(obj: T) -> T:
            self.add(name, obj)
            return obj

        return add

    def add(self, name: str, obj: T) -> None:
        old = self._entries.get(name)
        if old is not None and old is not obj and _identity(old) != _identity(obj):
            raise ValueError(f"{self.setting}: {name!r} is already registered to {old!r}")
        self._entries[name] = obj

    def get(self, name: str) -> T:
        """The entry under `name`; a UserError listing the valid names when there is none."""
        try:
            return self._entries[name]
        except KeyError:
            raise UserError(f"unknown {self.setting} '{name}'; valid: {', '.join(self._entries)}") from None

    def remove(self, name: str) -> None:
        """Unregister `name` (a plugin unloading, a test cleaning up); absent names are ignored."""
        self._entries.pop(name, None)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __getitem__(self, name: str) -> T:
        return self._entries[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)
