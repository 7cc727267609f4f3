"""Tiny rows in each public dataset shape, written to tmp files (tests never read ../shared)."""

from __future__ import annotations

import json
from pathlib import Path

GSM8K = [
    {"question": "Tom has 3 apples and buys 4. How many?", "answer": "3 + 4 = <<3+4=7>>7\n#### 7"},
    {"question": "A car costs 1000 dollars twice. Total?", "answer": "2 * 1000 = 2000\n#### 2,000"},
]
MATH500 = [
    {"problem": "What is $\\frac{1}{2}+\\frac{1}{2}$?", "solution": "It is $\\boxed{1}$.", "answer": "1",
     "subject": "Algebra", "level": 1, "unique_id": "test/algebra/1.json"},
    {"problem": "Compute $2^{10}$.", "solution": "$2^{10} = \\boxed{1024}$", "answer": "1024",
     "subject": "Algebra", "level": 2, "unique_id": "test/algebra/2.json"},
]
DAPO = [
    {"data_source": "math_dapo", "prompt": [{"role": "user", "content": "Find $x$ if $x+1=3$."}], "ability": "MATH",
     "reward_model": {"ground_truth": "2", "style": "rule"}, "extra_info": {"index": 0, "split": "train"}},
    {"data_source": "math_dapo", "prompt": [{"role": "user", "content": "What is $6 \\times 7$?"}], "ability": "MATH",
     "reward_model": {"ground_truth": "42", "style": "rule"}, "extra_info": {"index": 1, "split": "train"}},
]


def write_jsonl(path: Path, rows: list) -> Path:
    """Rows may be dicts (dumped) or raw strings (written as-is, for malformed lines)."""
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def write_parquet(path: Path, rows: list[dict]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path)
    return path
