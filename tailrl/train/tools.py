"""Multi-turn tool use in training (rollout.tools / rollout.environment): the executor and the engine's
`Turns` built from the config, the text rewards read, and the step's tool telemetry.

    executor = build_executor(cfg.rollout)          # before the model loads: a bad tool is one line, exit 2
    turns = ToolTurns(executor, tok, cfg.rollout.tool_parser, cfg.rollout.max_turns)   # engine(turns=...)

Prompts carry the tools' schemas through the chat template (`tools=`); a rollout's completion holds the
model's turns and the observations between them (token_mask 0: out of the loss, engine/turns.py); rewards
score the final turn (the text after the last observation: groups.reward_text), as a single-turn answer is.
"""

from __future__ import annotations

import statistics

from tailrl.engine import Rollout, RolloutTrace
from tailrl.tools import ToolExecutor
from tailrl.train.distributed import SINGLE, DistContext


def build_executor(rollout_cfg) -> ToolExecutor | None:
    """The tool executor of a RolloutConfig (its workers started), or None for single-turn rollouts."""
    r = rollout_cfg
    if not r.tools and not r.environment:
        return None
    return ToolExecutor(tools=r.tools, environment=r.environment or None, workers=r.tool_workers,
                        timeout_s=r.tool_timeout_s)


def tool_metrics(executor: ToolExecutor, rollouts: list[Rollout], traces: list[RolloutTrace],
                 ctx: DistContext = SINGLE) -> dict[str, float]:
    """rollout/turns_* (the model's turns per rollout: 1 without a tool call), tools/* and rollout/parked_frac
    of a step. The executor's counts are this rank's
    (a collective under torchrun: summed over ranks); rollouts are every rank's (gathered groups)."""
    counts = executor.metrics()
    keys = ("tools/calls", "tools/errors", "tools/timeouts", "tools/env_errors", "tools/restarts")
    summed = dict(zip(keys, ctx.sum([counts[k] for k in keys])))
    turns = [r.turns + 1 for r in rollouts] or [1]  # the model's turns: observations received + 1
    return summed | {
        "rollout/turns_mean": statistics.mean(turns), "rollout/turns_max": float(max(turns)),
        "tools/calls_mean": summed["tools/calls"] / max(len(rollouts), 1),
        "tools/latency_s": counts["tools/latency_mean_s"], "tools/latency_max_s": counts["tools/latency_max_s"],
        "rollout/parked_frac": statistics.mean(tr.parked_frac() for tr in traces) if traces else 0.0,
    }
