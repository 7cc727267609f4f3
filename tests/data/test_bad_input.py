"""Bad input: missing files, empty datasets, malformed rows (skip and count, or fail), bad config."""

from __future__ import annotations

import json

import pytest

from tailrl.config import DataConfig
from tailrl.data.datasets import load_dataset
from tailrl.errors import UserError
from tests.helpers import GSM8K, write_jsonl, write_parquet

MIXED = [
    {"prompt": "ok 0", "answer": "0"},
    "{not json",
    {"prompt": "no answer"},
    "[1, 2]",
    {"prompt": 5, "answer": "1"},
    {"messages": [{"role": "assistant", "content": "x"}], "answer": "1"},
    "",
    {"prompt": "ok 1", "answer": "1"},
]


def test_skip_and_count(tmp_path):
    ds = load_dataset(DataConfig(source=str(write_jsonl(tmp_path / "d.jsonl", MIXED))))
    assert [e.prompt for e in ds.examples] == ["ok 0", "ok 1"]
    assert ds.skipped == 5
    assert [e.uid for e in ds.examples] == [0, 6]  # record index: blank lines are not records
    assert ds.errors[0].startswith("line 2: not valid JSON")
    assert ds.errors[1] == "line 3: missing field 'answer' (row has: prompt)"


@pytest.mark.parametrize("bad, line, why", [
    ("{not json", 2, "not valid JSON"),
    ({"prompt": "no answer"}, 2, "missing field 'answer'"),
    ({"question": "q"}, 2, "missing field 'prompt'"),
    ({"prompt": "x", "answer": None}, 2, "field 'answer' is null"),
])
def test_fail_names_line_and_field(tmp_path, bad, line, why):
    src = write_jsonl(tmp_path / "d.jsonl", [{"prompt": "fine", "answer": "1"}, bad])
    with pytest.raises(UserError, match=f"line {line}: {why}"):
        load_dataset(DataConfig(source=str(src), on_bad_row="fail"))


def test_fail_names_parquet_row(tmp_path):
    src = write_parquet(tmp_path / "d.parquet", [{"prompt": "a", "answer": "1"}, {"prompt": "b", "answer": None}])
    with pytest.raises(UserError, match="row 1: field 'answer' is null"):
        load_dataset(DataConfig(source=str(src), on_bad_row="fail"))


def test_gsm8k_row_without_hash_answer(tmp_path):
    rows = [*GSM8K, {"question": "q", "answer": "no final line"}]
    ds = load_dataset(DataConfig(source=str(write_jsonl(tmp_path / "g.jsonl", rows))))
    assert len(ds) == 2 and ds.skipped == 1 and "####" in ds.errors[0]


def test_empty_dataset(tmp_path):
    (tmp_path / "empty.jsonl").write_text("\n\n")
    with pytest.raises(UserError, match=r"has no usable rows \(0 skipped"):
        load_dataset(DataConfig(source=str(tmp_path / "empty.jsonl")))
    src = write_jsonl(tmp_path / "allbad.jsonl", [{"text": "x"}, "oops"])
    with pytest.raises(UserError, match="no usable rows \\(2 skipped: first reason line 1: missing field 'prompt'"):
        load_dataset(DataConfig(source=str(src)))
    (tmp_path / "empty.json").write_text("[]")
    with pytest.raises(UserError, match="no usable rows"):
        load_dataset(DataConfig(source=str(tmp_path / "empty.json")))


def test_missing_and_unreadable_sources(tmp_path):
    with pytest.raises(UserError, match="dataset not found"):
        load_dataset(DataConfig(source=str(tmp_path / "nope.jsonl")))
    with pytest.raises(UserError, match="data.source is empty"):
        load_dataset(DataConfig())
    (tmp_path / "d.csv").write_text("a,b\n")
    with pytest.raises(UserError, match="set data.format to one of"):
        load_dataset(DataConfig(source=str(tmp_path / "d.csv")))
    (tmp_path / "folder").mkdir()
    with pytest.raises(UserError, match="not a `datasets.save_to_disk` folder"):
        load_dataset(DataConfig(source=str(tmp_path / "folder")))
    (tmp_path / "broken.json").write_text('[{"prompt": "a"}, ')
    with pytest.raises(UserError, match="not valid JSON"):
        load_dataset(DataConfig(source=str(tmp_path / "broken.json")))
    (tmp_path / "broken.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(UserError, match="could not read parquet"):
        load_dataset(DataConfig(source=str(tmp_path / "broken.parquet")))


def test_bad_config_values(tmp_path):
    src = str(write_jsonl(tmp_path / "d.jsonl", [{"prompt": "a", "answer": "1"}]))
    with pytest.raises(UserError, match="valid: auto, jsonl, json, parquet, hf_disk, gsm8k, math500"):
        load_dataset(DataConfig(source=src, format="csv"))
    with pytest.raises(UserError, match="unknown data.on_bad_row .ignore.; valid: skip, fail"):
        load_dataset(DataConfig(source=src, on_bad_row="ignore"))
    with pytest.raises(UserError, match="must contain \\{prompt\\}"):
        load_dataset(DataConfig(source=src, prompt_template="no slot"))


def test_explicit_container_overrides_extension(tmp_path):
    path = tmp_path / "rows.txt"
    path.write_text(json.dumps({"prompt": "a", "answer": "1"}) + "\n")
    assert load_dataset(DataConfig(source=str(path), format="jsonl")).examples[0].prompt == "a"
