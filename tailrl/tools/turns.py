"""Tool use in the engine: `ToolTurns` is the engine's `Turns` (tailrl/engine/turns.py) for tool calls.

At the end of a turn the turn's text (since the last observation) is parsed by a TOOL_PARSERS entry; no call
ends the rollout as usual, calls run on the ToolExecutor's workers while every other sequence keeps decoding,
and once all of a turn's calls are done the observation suffix (tool messages + the next generation
prompt) is rendered by the chat template the way TRL renders it (chat.observation_ids). Observations are
a pure function of the calls for deterministic tools, so the rollouts stay keyed and exact.

Duck-typed on the engine's Sequence (tokens, token_mask, turns, num_prompt, seq_id): tools import nothing
from the engine. With an environment, `sessions(seq)` names the rollout's episode (train/episodes.py): its
calls run on that instance, in order.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tailrl.tools.chat import observation_ids, tool_messages
from tailrl.tools.executor import Session, ToolExecutor, ToolHandle
from tailrl.tools.parsers import TOOL_PARSERS


class ToolTurns:
    def __init__(self, executor: ToolExecutor, tokenizer: Any, parser: str = "hermes", max_turns: int = 8,
                 end_token_id: int | None = None, poll_s: float = 0.002,
                 sessions: Callable[[Any], Session | None] | None = None):
        """max_turns: observations a rollout receives at most (the next end of turn finishes it);
        end_token_id: the token that ends an assistant turn (default: the tokenizer's eos); sessions: seq ->
        its episode, with an environment (its calls run on that instance)."""
        self.executor, self.tok, self.parse = executor, tokenizer, TOOL_PARSERS.get(parser)
        self.max_turns, self.end_token_id, self.poll_s = max_turns, end_token_id, poll_s
        self.pending: dict[int, tuple[Any, list[ToolHandle]]] = {}  # seq_id -> (seq, its turn's calls)
        self.sessions = sessions

    @staticmethod
    def turn_start(seq) -> int:
        """Index in seq.tokens where the current turn began: after the last observation token, else at the
        end of the prompt."""
        mask = seq.token_mask or []
        last_obs = max((i for i, m in enumerate(mask) if m == 0), default=-1)
        return seq.num_prompt + last_obs + 1

    def end_turn(self, seq) -> bool:
        if seq.turns >= self.max_turns:
            return False
        text = self.tok.decode(seq.tokens[self.turn_start(seq):], skip_special_tokens=True)
        _, calls = self.parse(text)
        if not calls:
            return False
        session = self.sessions(seq) if self.sessions is not None else None
        self.pending[seq.seq_id] = (seq, [self.executor.submit(c, session) for c in calls])
        return True

    def ready(self, timeout: float) -> list[tuple[Any, list[int] | None]]:
        """Sequences whose every call is done, with their observation tokens; waits up to `timeout`."""
        deadline = time.monotonic() + timeout
        while True:
            out = []
            for sid, (seq, handles) in list(self.pending.items()):
                if all(h.done() for h in handles):
                    del self.pending[sid]
                    messages = tool_messages([h.result() for h in handles])
                    out.append((seq, observation_ids(self.tok, messages, self.executor.schemas, self.end_token_id)))
            if out or time.monotonic() >= deadline:
                return out
            time.sleep(self.poll_s)
