"""Each container and row schema, read from tiny rows made in tmp_path."""

from __future__ import annotations

import json
import sys
import types
from dataclasses import replace

import pytest

from tailrl.config import DataConfig
from tailrl.data.datasets import load_dataset
from tailrl.data.formats import last_boxed
from tailrl.errors import UserError
from tests.helpers import DAPO, GSM8K, MATH500, write_jsonl, write_parquet


def test_jsonl_plain_prompt(tmp_path):
    src = write_jsonl(tmp_path / "d.jsonl", [{"prompt": "1+1?", "answer": 2, "topic": "add"}, {"prompt": "2+2?", "answer": "4"}])
    ds = load_dataset(DataConfig(source=str(src)))
    assert ds.format == "generic/jsonl" and ds.skipped == 0 and len(ds) == 2
    ex = ds.examples[0]
    assert ex.uid == 0 and ex.prompt == "1+1?" and ex.answer == "2"
    assert ex.messages == ({"role": "user", "content": "1+1?"},)
    assert ex.row == {"answer": "2", "topic": "add"}  # "prompt" is passed to rewards separately
    json.dumps(ex.row)


def test_jsonl_messages(tmp_path):
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi?"}]
    src = write_jsonl(tmp_path / "d.jsonl", [{"messages": msgs, "answer": "hello"}])
    ex = load_dataset(DataConfig(source=str(src), system_prompt="ignored: row has its own")).examples[0]
    assert ex.messages == tuple(msgs) and ex.prompt == "Hi?" and ex.answer == "hello"


def test_json_array_and_json_lines(tmp_path):
    rows = [{"prompt": "a", "answer": "1"}, {"prompt": "b", "answer": "2"}]
    (tmp_path / "arr.json").write_text(json.dumps(rows))
    write_jsonl(tmp_path / "lines.json", rows)  # Dataset.to_json writes JSON lines under .json
    for name in ("arr.json", "lines.json"):
        ds = load_dataset(DataConfig(source=str(tmp_path / name)))
        assert [e.prompt for e in ds.examples] == ["a", "b"] and ds.format == "generic/json"


def test_parquet_plain(tmp_path):
    src = write_parquet(tmp_path / "d.parquet", [{"prompt": "p0", "answer": "0"}, {"prompt": "p1", "answer": "1"}])
    ds = load_dataset(DataConfig(source=str(src)))
    assert ds.format == "generic/parquet" and [e.answer for e in ds.examples] == ["0", "1"]


def test_gsm8k_answer_extraction(tmp_path):
    src = write_jsonl(tmp_path / "test.jsonl", GSM8K)
    ds = load_dataset(DataConfig(source=str(src)))
    assert ds.format == "gsm8k/jsonl"
    assert [e.answer for e in ds.examples] == ["7", "2000"]  # thousands comma removed
    ex = ds.examples[0]
    assert ex.prompt == GSM8K[0]["question"] and ex.row["answer"] == "7"
    assert ex.row["solution"] == GSM8K[0]["answer"]  # the worked solution is kept
    explicit = load_dataset(DataConfig(source=str(src), format="gsm8k"))
    assert [e.answer for e in explicit.examples] == ["7", "2000"]


def test_math500(tmp_path):
    ds = load_dataset(DataConfig(source=str(write_jsonl(tmp_path / "test.jsonl", MATH500))))
    assert ds.format == "math500/jsonl" and [e.answer for e in ds.examples] == ["1", "1024"]
    assert ds.examples[1].row["subject"] == "Algebra" and ds.examples[1].prompt == MATH500[1]["problem"]


def test_math_answer_from_boxed_solution_and_float_answers(tmp_path):
    rows = [{"problem": "x?", "solution": "so $\\boxed{\\frac{1}{2}}$"}, {"problem": "y?", "answer": 27.0}]
    ds = load_dataset(DataConfig(source=str(write_jsonl(tmp_path / "m.jsonl", rows))))
    assert [e.answer for e in ds.examples] == ["\\frac{1}{2}", "27"]
    assert last_boxed("a \\boxed{1} then \\boxed{x^{2}}") == "x^{2}" and last_boxed("none") is None


def test_dapo_math_parquet(tmp_path):
    src = write_parquet(tmp_path / "dapo.parquet", DAPO)
    ds = load_dataset(DataConfig(source=str(src), system_prompt="Think."))
    assert ds.format == "dapo_math/parquet"
    ex = ds.examples[1]
    assert ex.answer == "42" and ex.prompt == "What is $6 \\times 7$?"
    assert ex.messages == ({"role": "system", "content": "Think."}, {"role": "user", "content": ex.prompt})
    assert ex.row["reward_model"]["ground_truth"] == "42" and ex.row["answer"] == "42" and "prompt" not in ex.row
    assert load_dataset(DataConfig(source=str(src), format="dapo_math")).examples[1].answer == "42"


def test_field_mapping_with_dotted_answer(tmp_path):
    rows = [{"q": "Why?", "meta": {"gold": "because"}}]
    src = write_jsonl(tmp_path / "d.jsonl", rows)
    ex = load_dataset(DataConfig(source=str(src), prompt_field="q", answer_field="meta.gold")).examples[0]
    assert ex.prompt == "Why?" and ex.answer == "because" and ex.row["q"] == "Why?"
    conv = write_jsonl(tmp_path / "c.jsonl", [{"conv": [{"role": "user", "content": "Hey"}], "label": 1}])
    ex = load_dataset(DataConfig(source=str(conv), messages_field="conv", answer_field="label")).examples[0]
    assert ex.prompt == "Hey" and ex.answer == "1"


def test_no_answer_field(tmp_path):
    src = write_jsonl(tmp_path / "d.jsonl", [{"prompt": "open question"}])
    ex = load_dataset(DataConfig(source=str(src), answer_field="")).examples[0]
    assert ex.answer is None and ex.row == {"answer": None}


def test_prompt_template_and_system_prompt(tmp_path):
    src = write_jsonl(tmp_path / "d.jsonl", [{"prompt": "Solve $x^{2}=4$.", "answer": "2"}])
    cfg = DataConfig(source=str(src), prompt_template="{prompt}\nPut the answer in \\boxed{}.", system_prompt="S")
    ex = load_dataset(cfg).examples[0]
    assert ex.prompt == "Solve $x^{2}=4$.\nPut the answer in \\boxed{}."  # braces in both survive
    assert ex.messages == ({"role": "system", "content": "S"}, {"role": "user", "content": ex.prompt})
    dapo = load_dataset(DataConfig(source=str(write_parquet(tmp_path / "d.parquet", DAPO)), prompt_template="Q: {prompt}"))
    assert dapo.examples[0].messages[-1]["content"] == "Q: Find $x$ if $x+1=3$." == dapo.examples[0].prompt


def test_limit_keeps_first_usable_rows(tmp_path):
    src = write_jsonl(tmp_path / "d.jsonl", ["{bad", *({"prompt": f"p{i}", "answer": str(i)} for i in range(5))])
    ds = load_dataset(DataConfig(source=str(src), limit=2))
    assert [(e.uid, e.prompt) for e in ds.examples] == [(1, "p0"), (2, "p1")] and ds.skipped == 1


def test_source_argument_overrides_cfg(tmp_path):
    a = write_jsonl(tmp_path / "a.jsonl", [{"prompt": "train", "answer": "1"}])
    b = write_jsonl(tmp_path / "b.jsonl", [{"prompt": "eval", "answer": "1"}])
    ds = load_dataset(DataConfig(source=str(a), eval_source=str(b)), str(b))
    assert ds.examples[0].prompt == "eval" and ds.source == str(b)


def test_hf_disk_folder(tmp_path, monkeypatch):
    folder = tmp_path / "saved"
    folder.mkdir()
    (folder / "dataset_dict.json").write_text('{"splits": ["train", "test"]}')
    if "datasets" not in sys.modules:
        try:
            import datasets  # noqa: F401
        except ImportError:
            with pytest.raises(UserError, match="pip install datasets"):
                load_dataset(DataConfig(source=str(folder)))

    class FakeDict(dict):
        pass

    fake = types.ModuleType("datasets")
    fake.DatasetDict = FakeDict
    fake.load_from_disk = lambda p: FakeDict(train=[{"prompt": "from disk", "answer": "1"}], test=[])
    monkeypatch.setitem(sys.modules, "datasets", fake)
    ds = load_dataset(DataConfig(source=str(folder)))
    assert ds.format == "generic/hf_disk" and ds.examples[0].prompt == "from disk"


def test_reasoning_gym_source():
    pytest.importorskip("reasoning_gym")
    cfg = DataConfig(source="reasoning_gym:basic_arithmetic", reasoning_gym_size=6, seed=3)
    ds = load_dataset(cfg)
    assert len(ds) == 6 and ds.format == "reasoning_gym/reasoning_gym"
    ex = ds.examples[0]
    assert ex.answer is not None and ex.row["reasoning_gym_task"] == "basic_arithmetic"
    assert ex.row["answer"] == ex.answer and "metadata" in ex.row
    json.dumps(ex.row)
    assert [e.prompt for e in load_dataset(cfg).examples] == [e.prompt for e in ds.examples]  # seeded
    with pytest.raises(UserError, match="did you mean basic_arithmetic"):
        load_dataset(DataConfig(source="reasoning_gym:basic_arithmetc"))


def test_a_reasoning_gym_eval_source_is_held_out():
    """data.eval_source naming the training task is generated from another seed (not the training rows), and a
    problem space too small for that says so."""
    pytest.importorskip("reasoning_gym")
    import warnings

    cfg = DataConfig(source="reasoning_gym:basic_arithmetic", eval_source="reasoning_gym:basic_arithmetic",
                     reasoning_gym_size=20, seed=3)
    train = {e.prompt for e in load_dataset(cfg).examples}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a wide problem space: no training question comes back
        held = [e.prompt for e in load_dataset(cfg, cfg.eval_source, held_out=True).examples]
    assert len(held) == 20 and not train & set(held)
    assert held == [e.prompt for e in load_dataset(cfg, cfg.eval_source, held_out=True).examples]  # seeded
    tiny = replace(cfg, reasoning_gym_args={"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1,
                                            "operators": ["+"]}, reasoning_gym_size=400)
    with pytest.warns(UserWarning, match="also appear in the training rows"):
        load_dataset(tiny, tiny.eval_source, held_out=True)
