"""encode_example: chat template with generation prompt, or plain prompt text."""

from __future__ import annotations

import pytest

from tailrl.config import DataConfig
from tailrl.data.datasets import encode_example, load_dataset
from tailrl.data.prompts import encode_row
from tailrl.errors import UserError
from tests.helpers import make_char_tokenizer, write_jsonl


@pytest.fixture(scope="module")
def tok():
    return make_char_tokenizer()


def _example(tmp_path, **cfg):
    src = write_jsonl(tmp_path / "d.jsonl", [{"prompt": "2+2?", "answer": "4"}])
    return load_dataset(DataConfig(source=str(src), **cfg)).examples[0]


def test_chat_template(tmp_path, tok):
    ex = _example(tmp_path, system_prompt="Be exact.")
    ids = encode_example(ex, tok)
    assert tok.decode(ids) == "<|system|>Be exact.<|end|><|user|>2+2?<|end|><|assistant|>"
    assert ids == encode_row({"messages": list(ex.messages)}, tok)[0]  # same path as `tailrl generate`


def test_plain_text(tmp_path, tok):
    ex = _example(tmp_path, prompt_template="Q: {prompt}\nA:")
    ids = encode_example(ex, tok, chat_template=False)
    assert tok.decode(ids, skip_special_tokens=True) == "Q: 2+2?\nA:"
    with_system = _example(tmp_path, system_prompt="S")
    assert tok.decode(encode_example(with_system, tok, chat_template=False), skip_special_tokens=True) == "S\n\n2+2?"


def test_missing_chat_template(tmp_path):
    t = make_char_tokenizer()
    t.chat_template = None
    with pytest.raises(UserError, match="chat_template=false"):
        encode_example(_example(tmp_path), t)
