"""The demo policy's tokenizer: one token per character of the task's alphabet (HF fast tokenizer)."""

from __future__ import annotations

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors

from tailrl.data.demo_task import VOCAB

SPECIALS = ["<pad>", "<s>", "</s>"]


def demo_tokenizer():
    return char_tokenizer(VOCAB)


def char_tokenizer(chars: list[str], **kwargs):
    """One ordinary token per character of `chars` after SPECIALS, a leading <s> (HF fast tokenizer);
    kwargs go to PreTrainedTokenizerFast."""
    # lazy: transformers takes seconds to import; only tokenizers and HF checkpoints need it
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate(SPECIALS + chars)}
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    tk.pre_tokenizer = pre_tokenizers.Split(pattern="", behavior="isolated")
    tk.decoder = decoders.Fuse()
    tk.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                   **kwargs)
