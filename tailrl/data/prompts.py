"""Prompt files for `tailrl generate`: JSONL rows of {"prompt": str} or {"messages": [...]}.

A malformed row does not stop the run: it becomes a PromptRow with an error, which the engine turns
into an error rollout while the other prompts complete.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from tailrl.errors import UserError


@dataclass
class PromptRow:
    index: int  # 0-based index among non-blank lines (the output's prompt_index)
    line: int  # 1-based line number in the file
    token_ids: list[int]
    text: str = ""
    error: str | None = None


def encode_row(row: dict, tokenizer, tools: list[dict] | None = None) -> tuple[list[int], str]:
    """A {"prompt"} row is encoded as plain text; a {"messages"} row through the chat template (with the
    tools' JSON schemas as its `tools=`, when a multi-turn run has tools)."""
    if "messages" in row:
        msgs = row["messages"]
        if not isinstance(msgs, list) or not all(isinstance(m, dict) and "role" in m and "content" in m for m in msgs):
            raise ValueError('"messages" must be a list of {"role", "content"} objects')
        text = tokenizer.apply_chat_template(msgs, tools=tools or None, tokenize=False, add_generation_prompt=True)
        return tokenizer(text, add_special_tokens=False)["input_ids"], text
    if "prompt" in row:
        if not isinstance(row["prompt"], str):
            raise ValueError('"prompt" must be a string')
        return tokenizer(row["prompt"])["input_ids"] if row["prompt"] else [], row["prompt"]
    raise ValueError('row needs a "prompt" or a "messages" field')


def read_prompts(path: str | Path, tokenizer) -> list[PromptRow]:
    p = Path(path)
    if not p.is_file():
        raise UserError(f"prompts file not found: {p}")
    rows: list[PromptRow] = []
    with p.open(encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            idx = len(rows)
            try:
                row = json.loads(line)
                if not isinstance(row, dict):
                    raise ValueError("row is not a JSON object")
                ids, text = encode_row(row, tokenizer)
                rows.append(PromptRow(idx, lineno, ids, text))
            except (json.JSONDecodeError, ValueError) as e:
                rows.append(PromptRow(idx, lineno, [], error=f"line {lineno}: {e}"))
    if not rows:
        raise UserError(f"prompts file {p} has no rows")
    return rows
