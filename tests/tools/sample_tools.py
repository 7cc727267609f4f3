"""Tools and environments the tool tests load by ref (`tests.tools.sample_tools:add`) in worker processes:
well-behaved ones, and ones that raise, hang, exit, crash or return an object."""

from __future__ import annotations

import asyncio
import ctypes
import os
import time


def add(a: int, b: int = 0) -> int:
    """Add two integers.

    Args:
        a: The first integer.
        b: The second integer.

    Returns:
        The sum.
    """
    return a + b


def echo(text: str, delay: float = 0.0) -> str:
    """Return the text after a pause.

    Args:
        text: What to return.
        delay: Seconds to wait first.
    """
    time.sleep(delay)
    return text


def trouble(mode: str) -> str:
    """Misbehave on purpose.

    Args:
        mode: One of raise, exit, crash, hang, spin, object, none, pid.
    """
    if mode == "raise":
        raise ZeroDivisionError("division by zero")
    if mode == "exit":
        os._exit(3)
    if mode == "crash":
        ctypes.string_at(0)
    if mode == "hang":  # stuck in C code: only a kill ends it
        ctypes.CDLL(None).sleep(60)
    if mode == "spin":
        while True:
            pass
    if mode == "object":
        return object()  # its str() would carry a memory address
    if mode == "none":
        return None
    if mode == "system_exit":
        raise SystemExit(2)
    return str(os.getpid())


async def async_add(a: int, b: int) -> int:
    """Asynchronously add two integers.

    Args:
        a: The first integer.
        b: The second integer.
    """
    await asyncio.sleep(0)
    return a + b


def no_docstring(a: int) -> int:
    return a


def no_hints(a):
    """Return a.

    Args:
        a: Anything.
    """
    return a


class IncrementEnv:
    """TRL's documentation example (GRPOTrainer, "Environments"), unchanged but for a fixed target."""

    # Reserved methods
    def reset(self, **kwargs) -> str | None:  # required; called at the start of each rollout
        self.counter = 0
        self.target = kwargs.get("target", 3)
        return f"Increment the counter by {self.target}."  # returned string becomes the prompt

    def get_reward(self) -> float:  # optional: the environment scores itself from its own state
        return float(self.counter == self.target)

    # Public methods (exposed as tools)
    def increment(self, step: int) -> int:
        """
        Increment the internal counter.

        Args:
            step: Value to add to the counter.

        Returns:
            The updated counter value.
        """
        self.counter += step
        return self.counter


class GameEnv:
    """Every kind of member TRL's rule must sort: tools, private, reserved, static, class methods."""

    instances = 0

    def __init__(self):
        GameEnv.instances += 1
        self.made = GameEnv.instances  # which instance of this process this is (reuse is visible)

    def reset(self, **row) -> None:
        self.moves: list[str] = []

    async def get_reward(self) -> float:
        return float(len(self.moves))

    def move(self, action: str, wait: float = 0.0) -> str:
        """Apply an action.

        Args:
            action: One of up, down, left, right.
            wait: Seconds the move takes.
        """
        time.sleep(wait)
        self.moves.append(action)
        return ",".join(self.moves)

    async def look(self) -> str:
        """Describe the state."""
        return f"{len(self.moves)} moves; instance {self.made}"

    def freeze(self) -> str:
        """Hang in C code (for timeouts)."""
        ctypes.CDLL(None).sleep(60)
        return "unreachable"

    @classmethod
    def rules(cls) -> str:
        """The rules (a classmethod: TRL exposes it too)."""
        return "move to win"

    @staticmethod
    def helper(x: int) -> int:  # a staticmethod is a plain function on the instance: not a tool
        return x

    def _private(self) -> None:
        pass


class NoResetEnv:
    def step(self, x: int) -> int:
        """Step.

        Args:
            x: A number.
        """
        return x


class BadMethodEnv:
    def reset(self, **row) -> None:
        pass

    def act(self, x):
        """Act without a type hint.

        Args:
            x: A value.
        """
        return x


class FlakyEnv:
    """One instance per process at most; reset misbehaves on request."""

    made = 0

    def __init__(self):
        FlakyEnv.made += 1
        if FlakyEnv.made > 1:
            raise RuntimeError("only one instance")

    def reset(self, mode: str = "ok", **row):
        if mode == "raise":
            raise ValueError("bad row")
        return 5 if mode == "int" else None

    def get_reward(self) -> float:
        return 1.0

    def ping(self) -> str:
        """Answer pong."""
        return "pong"
