"""Warm-start the tools demo's policy: the demo's tiny Llama, trained by the same short SFT on rows that
either call the calculator or solve the problem by today's chain (tools_data.py), cached under a key of
its own (`demo-tools-policy-<key>`; the single-turn demo's cache entries and keys are untouched).

The SFT teaches the call format and when a call is allowed (only when the prompt lists the tool); it does
not make the call the habit: GRPO with the tool then decides between calling and writing the chain.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from functools import partial
from pathlib import Path

from tailrl.data.demo_task import DemoTask
from tailrl.demo.tools_data import ToolsMix, tool_schemas, tools_sft_chunks
from tailrl.demo.tools_tokenizer import TOOLS_TEMPLATE, tools_tokenizer
from tailrl.demo.warmstart import WarmStartParams, is_cached, save_cached, train_sft


def tools_key(task: DemoTask, spec: WarmStartParams, mix: ToolsMix) -> str:
    """Cache key of a tools warm start: the task, the SFT, the row mix and the chat template."""
    blob = json.dumps({"spec": asdict(spec), "task": asdict(task), "mix": asdict(mix), "template": TOOLS_TEMPLATE,
                       "v": "tools-2"}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def tools_warm_start(cache_root: Path, task: DemoTask, spec: WarmStartParams, mix: ToolsMix | None = None,
                     progress=None) -> Path:
    """Folder of the tools demo's warm-started policy (trained once per task/spec/mix, then cached): a plain
    HF folder whose tokenizer carries the tools chat template."""
    mix = mix or ToolsMix()
    folder = Path(cache_root) / f"demo-tools-policy-{tools_key(task, spec, mix)}"
    if is_cached(folder):
        return folder
    tok = tools_tokenizer()
    batches = partial(tools_sft_chunks, task, tok, n=spec.batch, mix=mix, schemas=tool_schemas())
    model, info = train_sft(task, spec, tok, progress, batches=batches)
    return save_cached(folder, model, tok, {"task": asdict(task), "spec": asdict(spec), "mix": asdict(mix), **info})
