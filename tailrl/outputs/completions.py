"""Rollouts as completion rows (`tailrl generate`'s JSONL output, also written by torchrun rank 0):
prompt_index, sample_index, token_ids, text, finish_reason, num_tokens (+ error)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tailrl.engine.request import Rollout, SamplingParams
from tailrl.engine.stops import trim_at_stop


def write_rollouts(rollouts: list[Rollout], tokenizer, params: SamplingParams, out_path: str | Path | None) -> None:
    """One JSON line per completion (the order given) to out_path or stdout."""
    out = open(out_path, "w", encoding="utf-8") if out_path else sys.stdout
    try:
        for r in rollouts:
            text = tokenizer.decode(r.token_ids, skip_special_tokens=True) if tokenizer is not None else ""
            if params.stop and r.finish_reason == "stop":
                text = trim_at_stop(text, params.stop)
            row = {"prompt_index": r.uid, "sample_index": r.sample_index, "token_ids": r.token_ids, "text": text,
                   "finish_reason": r.finish_reason, "num_tokens": r.num_tokens}
            if r.error:
                row["error"] = r.error
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
    finally:
        if out_path:
            out.close()
