"""Prompt datasets for training and eval: files or reasoning-gym tasks -> a list of Examples.

    ds = load_dataset(cfg.data)                       # cfg.data.source
    ev = load_dataset(cfg.data, cfg.data.eval_source, held_out=True)  # same fields/format, another source
    ids = encode_example(ds.examples[0], tokenizer, cfg.data.chat_template)

Two independent choices make a dataset: the container (how records are stored: JSONL, a JSON array,
parquet, a `datasets.save_to_disk` folder, or a generated reasoning-gym task) and the row schema (how
a record says question and answer: see formats.py). data.format names either one; anything it does
not name is inferred — the container from the path, the schema from the fields of the first rows.

A bad row (malformed JSON, missing field) is skipped and counted, or stops the run with a UserError
naming its line, as data.on_bad_row says; a dataset with no usable row is always an error, because a
run over nothing would "succeed" silently.
"""

from __future__ import annotations

import itertools
import json
import warnings
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow
import pyarrow.parquet as pq

from tailrl.config import DataConfig
from tailrl.data.formats import SCHEMAS, Parsed, RowError, detect_schema, jsonable, reasoning_gym_rows
from tailrl.data.prompts import encode_row
from tailrl.errors import UserError

FORMATS = ("auto", "jsonl", "json", "parquet", "hf_disk", "gsm8k", "math500", "dapo_math", "reasoning_gym")
GYM_PREFIX = "reasoning_gym:"
HELD_OUT_SEED = 1_000_003  # a reasoning-gym eval source is generated with data.seed + this: other problems
# Rewards are called as f(prompt=..., completion=..., **row): these keys would collide (TRL drops them too).
RESERVED_ROW_KEYS = ("prompt", "completion")
_DETECT_ROWS = 16  # rows looked at to infer the schema (majority vote, so one odd first row is harmless)
_KEEP_ERRORS = 5  # skip reasons kept for the log

Record = tuple[str, "dict | RowError"]  # (where: "line 3" / "row 2", the raw row or why it is unreadable)


@dataclass(frozen=True)
class Example:
    uid: int  # index of the record in the source (non-blank JSONL lines / rows), before shuffling or skipping
    prompt: str  # the question text after prompt_template (the last user turn), handed to rewards as `prompt`
    messages: tuple[dict, ...]  # chat turns to render: optional system turn + user turn, or the row's own
    answer: str | None  # ground truth as text (None only for answer-less sources)
    row: dict  # the row's JSON-able fields minus RESERVED_ROW_KEYS, with row["answer"] = answer


@dataclass
class PromptDataset:
    examples: list[Example]
    skipped: int  # bad rows skipped (on_bad_row=skip)
    source: str
    format: str = ""  # what was read, e.g. "gsm8k/jsonl" (schema/container)
    errors: list[str] = field(default_factory=list)  # the first few skip reasons, for the log

    def __len__(self) -> int:
        return len(self.examples)


# ---------------------------------------------------------------- containers


def _read_jsonl(path: Path) -> Iterator[Record]:
    with path.open(encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                yield f"line {lineno}", RowError(f"not valid JSON ({e.msg})")
                continue
            yield f"line {lineno}", row if isinstance(row, dict) else RowError("row is not a JSON object")


def _read_json(path: Path) -> Iterator[Record]:
    """A JSON array of objects, or JSON lines under a .json name (what `Dataset.to_json` writes)."""
    text = path.read_text(encoding="utf-8", errors="replace")
    if not text.lstrip().startswith("["):
        yield from _read_jsonl(path)
        return
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise UserError(f"dataset {path} is not valid JSON: {e.msg} at line {e.lineno}") from e
    for i, row in enumerate(data):
        yield f"row {i}", row if isinstance(row, dict) else RowError("row is not a JSON object")


def _read_parquet(path: Path) -> Iterator[Record]:
    i = 0
    try:
        for batch in pq.ParquetFile(path).iter_batches(batch_size=1024):  # streamed: data.limit stops early
            for row in batch.to_pylist():
                yield f"row {i}", row
                i += 1
    except (pyarrow.ArrowException, OSError) as e:
        raise UserError(f"could not read parquet file {path}: {e}") from e


def _read_hf_disk(path: Path) -> Iterator[Record]:
    """A `datasets.save_to_disk` folder; a DatasetDict folder yields its "train" split (or its only one)."""
    try:
        # lazy: optional dependency (the [e2e] extra)
        import datasets
    except ImportError as e:
        raise UserError(f"{path} is a Hugging Face `datasets` folder; reading it needs: pip install datasets") from e
    try:
        ds = datasets.load_from_disk(str(path))
    except Exception as e:  # datasets raises several types for a damaged folder
        raise UserError(f"could not load the datasets folder {path}: {e}") from e
    if isinstance(ds, datasets.DatasetDict):
        splits = list(ds.keys())
        if "train" not in splits and len(splits) != 1:
            raise UserError(f"{path} holds splits {', '.join(splits)}; point data.source at one split's folder")
        ds = ds["train" if "train" in splits else splits[0]]
    for i, row in enumerate(ds):
        yield f"row {i}", row


READERS = {"jsonl": _read_jsonl, "json": _read_json, "parquet": _read_parquet, "hf_disk": _read_hf_disk}
_EXTENSIONS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json", ".parquet": "parquet", ".pq": "parquet"}
_HF_MARKERS = ("dataset_info.json", "state.json", "dataset_dict.json")


def _container_for(path: Path) -> str:
    if path.is_dir():
        if any((path / m).is_file() for m in _HF_MARKERS):
            return "hf_disk"
        raise UserError(f"{path} is a folder but not a `datasets.save_to_disk` folder (no {' / '.join(_HF_MARKERS)})")
    kind = _EXTENSIONS.get(path.suffix.lower())
    if kind is None:
        raise UserError(f"cannot tell the format of {path} from its extension; set data.format to one of "
                        f"{', '.join(FORMATS[1:])}")
    return kind


def _gym_task(src: str, cfg: DataConfig) -> str | None:
    """The reasoning-gym task a source names (reasoning_gym:<task>, or any name with data.format=reasoning_gym)."""
    if src.startswith(GYM_PREFIX):
        return src[len(GYM_PREFIX):].strip()
    return src.strip() if cfg.format == "reasoning_gym" else None


def _gym_rows(task: str, cfg: DataConfig, held_out: bool) -> list[dict]:
    """Generated rows; a held-out set (an eval source) from another seed, with a warning when some of its
    questions are also training questions of the same task (a problem space smaller than the sizes)."""
    args = dict(cfg.reasoning_gym_args)
    if not held_out:
        return reasoning_gym_rows(task, cfg.reasoning_gym_size, cfg.seed, args)
    rows = reasoning_gym_rows(task, cfg.reasoning_gym_size, cfg.seed + HELD_OUT_SEED, args)
    if _gym_task(cfg.source, cfg) == task:
        seen = {r.get("question") for r in reasoning_gym_rows(task, cfg.reasoning_gym_size, cfg.seed, args)}
        both = sum(r.get("question") in seen for r in rows)
        if both:
            warnings.warn(f"data.eval_source reasoning_gym:{task}: {both} of its {len(rows)} generated questions "
                          "also appear in the training rows (the task's problem space is small for these sizes)",
                          stacklevel=4)
    return rows


def _open(src: str, cfg: DataConfig, held_out: bool = False) -> tuple[str, str | None, Iterator[Record]]:
    """(container, schema or None = infer, records)."""
    task = _gym_task(src, cfg)
    if task is not None:
        rows = _gym_rows(task, cfg, held_out)
        return "reasoning_gym", "reasoning_gym", ((f"entry {i}", r) for i, r in enumerate(rows))
    path = Path(src).expanduser()
    if not path.exists():
        raise UserError(f"dataset not found: {path}")
    container = cfg.format if cfg.format in READERS else _container_for(path)
    schema = cfg.format if cfg.format in SCHEMAS else None
    return container, schema, READERS[container](path)


# ---------------------------------------------------------------- rows -> examples


def _infer_schema(head: list[Record], cfg: DataConfig) -> str:
    votes = Counter(detect_schema(r, cfg) for _, r in head if isinstance(r, dict))
    return votes.most_common(1)[0][0] if votes else "generic"


def _render(parsed: Parsed, cfg: DataConfig) -> tuple[str, list[dict]]:
    """prompt_template wraps the question (or the row's last user turn); system_prompt is prepended
    unless the row's own messages already start with a system turn. str.replace, not str.format:
    LaTeX questions are full of braces."""
    if parsed.messages is None:
        prompt = cfg.prompt_template.replace("{prompt}", parsed.question)
        messages = [{"role": "user", "content": prompt}]
    else:
        messages = [dict(m) for m in parsed.messages]
        last = max(i for i, m in enumerate(messages) if m["role"] == "user")
        prompt = cfg.prompt_template.replace("{prompt}", messages[last]["content"])
        messages[last]["content"] = prompt
    if cfg.system_prompt and messages[0]["role"] != "system":
        messages.insert(0, {"role": "system", "content": cfg.system_prompt})
    return prompt, messages


def make_example(uid: int, parsed: Parsed, cfg: DataConfig) -> Example:
    prompt, messages = _render(parsed, cfg)
    row = jsonable({k: v for k, v in parsed.row.items() if k not in RESERVED_ROW_KEYS})
    row["answer"] = parsed.answer
    return Example(uid, prompt, tuple(jsonable(messages)), parsed.answer, row)


def _check(cfg: DataConfig, src: str) -> None:
    if not src:
        raise UserError("data.source is empty: give a .jsonl/.json/.parquet file, a datasets folder, "
                        "or reasoning_gym:<task>")
    if "{prompt}" not in cfg.prompt_template:
        raise UserError("data.prompt_template must contain {prompt} (where the question goes)")
    if cfg.limit < 0:
        raise UserError(f"data.limit must be >= 0, got {cfg.limit}")


def load_dataset(cfg: DataConfig, source: str | None = None, held_out: bool = False) -> PromptDataset:
    """Read every usable row of `source` (default cfg.source) into Examples, in file order. held_out: an
    evaluation set (data.eval_source): a reasoning-gym task is then generated from another seed."""
    src = cfg.source if source is None else source
    _check(cfg, src)
    container, schema, records = _open(src, cfg, held_out)
    head = list(itertools.islice(records, _DETECT_ROWS))
    schema = schema or _infer_schema(head, cfg)
    reader = SCHEMAS[schema]
    examples: list[Example] = []
    skipped, errors = 0, []
    for uid, (where, raw) in enumerate(itertools.chain(head, records)):
        if cfg.limit and len(examples) >= cfg.limit:
            break
        try:
            if isinstance(raw, RowError):
                raise raw
            examples.append(make_example(uid, reader(raw, cfg), cfg))
        except RowError as e:
            if cfg.on_bad_row == "fail":
                raise UserError(f"dataset {src} {where}: {e} (read as {schema}; data.on_bad_row=fail)") from e
            skipped += 1
            if len(errors) < _KEEP_ERRORS:
                errors.append(f"{where}: {e}")
    if not examples:
        first = f": first reason {errors[0]}" if errors else ""
        raise UserError(f"dataset {src} has no usable rows ({skipped} skipped{first}; read as {schema})")
    return PromptDataset(examples, skipped, src, f"{schema}/{container}", errors)


def encode_example(ex: Example, tokenizer, chat_template: bool = True, tools: list[dict] | None = None) -> list[int]:
    """Prompt token ids: the chat template with the generation prompt (and the tools' schemas), or the
    turns' plain text joined by blank lines (just the prompt when there is no system turn) — as `tailrl
    generate` does."""
    if chat_template:
        if not getattr(tokenizer, "chat_template", None):
            raise UserError("the tokenizer has no chat template; set data.chat_template=false for plain text")
        ids, _ = encode_row({"messages": list(ex.messages)}, tokenizer, tools)
    else:
        ids, _ = encode_row({"prompt": "\n\n".join(m["content"] for m in ex.messages)}, tokenizer)
    return list(ids)
