"""Environment episodes (rollout.environment: TRL's `environment_factory`): one environment instance per
rollout, keyed by (prompt uid, sample index).

    episodes = Episodes(executor, encode_messages)
    requests = episodes.requests([(uid, example), ...], n, params)  # uid -> Requests, after the resets
    ToolTurns(..., sessions=episodes.session_of)            # the model's tool calls go to its own instance
    batch = episodes.add_reward(batch, [(uid, s), ...])     # get_reward() in the score, then closed

`reset(**row)` runs on the tool workers for every sample of a prompt at once; its text is appended to the
prompt's last message (chat.append_reset, TRL's rule). Samples whose prompts come out the same share one
Request (the engine forks the prompt's K/V); different prompts get a Request each, with the sample's own
index (`first_sample`), so every token stays keyed by (seed, uid, sample index, position).

The environment's reward is added to the reward functions' score with weight 1 and logged as the reward
component named after the environment's class (TRL logs it under that name); a failed or timed-out
get_reward() scores 0 and is counted with the reward errors / timeouts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from tailrl.engine import Request, SamplingParams
from tailrl.rewards.scoring import RewardBatch
from tailrl.tools import Session, ToolExecutor, append_reset


class Episodes:
    def __init__(self, executor: ToolExecutor, encode_messages: Callable[[object], list[int]]):
        """encode_messages(example): prompt token ids of an Example (its messages rendered)."""
        if executor.environment is None:
            raise ValueError("Episodes needs an executor with an environment")
        self.executor, self.encode = executor, encode_messages
        self.name = executor.environment.name
        self.open_sessions: dict[tuple[int, int], Session] = {}

    def requests(self, prompts: list[tuple[int, object]], n: int, params: SamplingParams) -> dict[int, list[Request]]:
        """Open n episodes per (uid, example) of `prompts` — every reset submitted before any is awaited, so
        they run in parallel on the workers — and return each uid's Requests (samples with equal prompts
        share one)."""
        for uid, example in prompts:
            for s in range(n):
                self.open_sessions[(uid, s)] = self.executor.open(example.row)
        out: dict[int, list[Request]] = {}
        for uid, example in prompts:
            reqs = out[uid] = []
            for s in range(n):
                text = self.open_sessions[(uid, s)].reset.result().content  # failed: "" (tools/env_errors)
                ids = self.encode(replace(example, messages=tuple(append_reset(list(example.messages), text))))
                if reqs and reqs[-1].prompt_ids == ids:
                    reqs[-1].n += 1
                else:
                    reqs.append(Request(ids, uid=uid, n=1, params=params, first_sample=s))
        return out

    def session_of(self, seq) -> Session | None:
        """The episode of an engine sequence (None: a sequence of no episode)."""
        return self.open_sessions.get((seq.request.uid, seq.sample_index))

    def add_reward(self, batch: RewardBatch, keys: list[tuple[int, int]]) -> RewardBatch:
        """The batch (rollouts (uid, sample index) in `keys` order) with each episode's get_reward() added,
        then the episodes closed. Without a get_reward() the episodes are only closed."""
        sessions = [self.open_sessions.pop(key) for key in keys]
        if not self.executor.environment.has_reward:
            for session in sessions:
                session.close()
            return batch
        handles = [session.reward() for session in sessions]
        scores, values = list(batch.scores), [0.0] * len(sessions)
        errors, timeouts = batch.errors, batch.timeouts
        for i, (session, handle) in enumerate(zip(sessions, handles)):
            got = handle.result()
            session.close()
            if got.timed_out:
                timeouts += 1
            elif got.failure is not None:
                errors += 1
            else:
                values[i] = got.value
                scores[i] += got.value
        return RewardBatch(scores, batch.components | {self.name: values}, errors, timeouts)

    def close(self) -> None:
        """Close every episode still open (a step abandoned, an evaluation's episodes)."""
        for session in self.open_sessions.values():
            session.close()
        self.open_sessions.clear()
