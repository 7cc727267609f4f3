"""Environments, with TRL's `environment_factory` contract: a stateful object per rollout whose public
methods are the model's tools.

    class IncrementEnv:                      # TRL's own example works unchanged
        def reset(self, **row) -> str | None: ...   # required: start an episode (row: the dataset row)
        def get_reward(self) -> float: ...          # optional: score the episode from the state
        def increment(self, step: int) -> int:      # a tool (type hints + Google docstring)
            ...

    env = load_environment("path/to/envs.py:IncrementEnv")   # or "package.module:Factory", or the class
    env.tools   # [Tool] from one probe instance's public methods; env.has_reward, env.name

The factory (a class or any callable returning an instance) is called once here, as TRL does, to probe
the instance: its tools are `environment_methods(instance)`, the members `inspect.ismethod` accepts
whose name does not start with "_", less the reserved `reset` and `get_reward`. A missing `reset` or a
method without hints / docstring is a UserError with one line, before any model loads.

Lifecycle (run inside tool workers, worker.py): an instance per rollout; `reset(**row)` starts an
episode and may return text appended to the prompt's last message (chat.append_reset); the model's tool
calls run its methods in order; `get_reward()` (sync or async) scores the finished episode. Instances
are reused across rollouts (TRL: "construct once, reset often"), so `reset` must clear episode state.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tailrl.errors import UserError
from tailrl.rewards.user import load_attribute, ref_of
from tailrl.tools.schema import Tool, check_unique, tool_schema

__all__ = ["RESERVED", "Environment", "environment_methods", "load_environment", "resolve_factory"]

RESERVED = ("reset", "get_reward")  # environment methods that are not tools

Factory = Callable[[], Any]


@dataclass(frozen=True)
class Environment:
    """A loaded environment factory: what the model is shown and what a worker loads again."""

    name: str  # the instance's class name (TRL logs an environment's reward under it)
    factory: Factory
    ref: str  # module:attr or file.py:attr, loaded again in each tool worker
    tools: list[Tool]  # its methods' schemas, in name order (inspect.getmembers' order)
    has_reward: bool  # defines get_reward


def environment_methods(instance: Any) -> dict[str, Callable[..., Any]]:
    """name -> bound method of every tool an instance exposes (TRL's rule, see the module docstring)."""
    return {name: member for name, member in inspect.getmembers(instance, predicate=inspect.ismethod)
            if not name.startswith("_") and name not in RESERVED}


def resolve_factory(environment: str | Factory) -> tuple[str, Factory]:
    """(ref, factory) of a `module:attr` / `file.py:attr` ref or a factory object that another process can
    import again; UserError otherwise."""
    if isinstance(environment, str):
        ref = environment.strip()
        _, factory = load_attribute(ref, "environment")
    else:
        factory, ref = environment, ref_of(environment)
        if ref is None:
            raise UserError(f"environment '{getattr(factory, '__qualname__', factory)}' is defined in the script "
                            "being run or inside a function, which tool workers cannot import; define it in a "
                            "module or file")
    if not callable(factory):
        raise UserError(f"environment '{ref}' must be a class or a factory function, got {type(factory).__name__}")
    return ref, factory


def load_environment(environment: str | Factory) -> Environment:
    """Resolve the factory and probe one instance; see the module docstring."""
    ref, factory = resolve_factory(environment)
    try:
        probe = factory()
    except Exception as e:
        raise UserError(f"environment '{ref}': creating an instance failed: {type(e).__name__}: "
                        f"{' '.join(str(e).split())}") from e
    if not callable(getattr(probe, "reset", None)):
        raise UserError(f"environment '{ref}' must define a callable reset(**row) (TRL's environment contract)")
    tools = [Tool(name, method, tool_schema(method, f"environment '{ref}' method '{name}'"), None)
             for name, method in environment_methods(probe).items()]
    check_unique(tools)
    has_reward = callable(getattr(probe, "get_reward", None))
    return Environment(type(probe).__name__, factory, ref, tools, has_reward)
