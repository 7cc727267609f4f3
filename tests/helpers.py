"""Shared test helpers, in one module: tiny random models and tokenizers, training-run configs, rows in the
public datasets' shapes, random paged KV caches. No network, no ../shared."""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import torch
import yaml

# Run the model/engine oracle tests on a GPU with TAILRL_TEST_DEVICE=cuda (CPU by default).
DEVICE = os.environ.get("TAILRL_TEST_DEVICE", "cpu")

FAMILIES = {
    "llama": dict(architectures=["LlamaForCausalLM"], model_type="llama"),
    "llama3_rope": dict(architectures=["LlamaForCausalLM"], model_type="llama",
                        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                      "high_freq_factor": 4.0, "original_max_position_embeddings": 64}),
    "llama_bias": dict(architectures=["LlamaForCausalLM"], model_type="llama", attention_bias=True, mlp_bias=True),
    "qwen2": dict(architectures=["Qwen2ForCausalLM"], model_type="qwen2"),
    "qwen3": dict(architectures=["Qwen3ForCausalLM"], model_type="qwen3", head_dim=16),
    "mistral": dict(architectures=["MistralForCausalLM"], model_type="mistral", sliding_window=None),
}


def tiny_hf_config(family: str = "llama", tied: bool = False, vocab: int = 97, layers: int = 2, **kw) -> dict:
    cfg = dict(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
               num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, rms_norm_eps=1e-6,
               rope_theta=10000.0, tie_word_embeddings=tied, hidden_act="silu", bos_token_id=1, eos_token_id=2,
               torch_dtype="float32")
    cfg.update(FAMILIES[family])
    cfg.update(kw)
    return cfg


def make_hf_model(cfg: dict, seed: int = 0):
    """A random-init transformers model (the oracle) for a config dict."""
    from transformers import AutoConfig, AutoModelForCausalLM

    conf = AutoConfig.for_model(cfg["model_type"], **{k: v for k, v in cfg.items() if k != "model_type"})
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(conf, attn_implementation="eager", dtype=torch.float32)
    with torch.no_grad():  # HF zero-inits some biases; make them matter
        for n, p in model.named_parameters():
            if n.endswith("bias") or "norm" in n:
                p.add_(torch.randn_like(p) * 0.1)
    return model.eval()


def save_hf_folder(model, folder: Path) -> Path:
    model.save_pretrained(str(folder), safe_serialization=True)
    return folder


def tiny_native(family: str = "llama", tied: bool = False, seed: int = 0, **kw):
    """A native model with the same weights as the HF oracle: (native, hf)."""
    from tailrl.model import ModelArgs, build_model, load_weights

    cfg = tiny_hf_config(family, tied, **kw)
    hf = make_hf_model(cfg, seed)
    native = build_model(ModelArgs.from_hf(cfg), device=DEVICE)
    load_weights(native, hf.state_dict().items())
    return native.eval(), hf.to(DEVICE)


def key_rows(n: int, seed: int = 7, uid: int = 3, pos: int = 5) -> torch.Tensor:
    """(n, 4) int64 sampling keys (seed, uid, sample index 0..n-1, position): n samples of one prompt."""
    k = torch.zeros(n, 4, dtype=torch.long)
    k[:, 0], k[:, 1], k[:, 2], k[:, 3] = seed, uid, torch.arange(n), pos
    return k


def write_json(path: Path, obj) -> Path:
    path.write_text(json.dumps(obj))
    return path


CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>{% endif %}")


def make_char_tokenizer():
    """A character-level HF fast tokenizer (printable ASCII + specials) with a chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "<s>", "</s>", "<|user|>", "<|assistant|>", "<|system|>", "<|end|>"]
    chars = [chr(c) for c in range(32, 127)] + ["\n"]
    vocab = {t: i for i, t in enumerate(specials + chars)}
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="?"))
    tk.pre_tokenizer = pre_tokenizers.Split(pattern="", behavior="isolated")
    tk.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                  additional_special_tokens=specials[3:])
    tok.chat_template = CHAT_TEMPLATE
    return tok


def make_model_dir(folder: Path, family: str = "llama", seed: int = 0, **kw) -> Path:
    """A complete tiny HF model folder (config, safetensors, tokenizer) with a real vocabulary."""
    tok = make_char_tokenizer()
    cfg = tiny_hf_config(family, vocab=len(tok), **kw)
    cfg["eos_token_id"], cfg["bos_token_id"] = tok.eos_token_id, tok.bos_token_id
    model = make_hf_model(cfg, seed)
    model.save_pretrained(str(folder), safe_serialization=True)
    tok.save_pretrained(str(folder))
    return folder


# -- training runs on the tiny model (tests/train) -----------------------------------------------------
TOY_REWARD = f"{Path(__file__).parent / 'train' / 'toy_reward.py'}:digit_reward"  # a user reward file


def base_overrides(model_dir, data, run_dir, **extra):
    o = {
        "model.path": str(model_dir), "data.source": str(data), "data.chat_template": "false",
        "reward.functions": f"[{TOY_REWARD}]", "rollout.group_size": 4, "rollout.max_new_tokens": 8,
        "rollout.temperature": 1.0, "train.rollout_batch_size": 8, "train.micro_batch_size": 3,
        "train.total_steps": 2, "train.lr": 1e-3, "train.tensorboard": "true", "engine.kv_cache_tokens": 2048,
        "engine.block_size": 4,
    }
    o.update(extra)
    return [f"{k}={v}" for k, v in o.items()]


def write_config(path, overrides):
    """A YAML config file from dotted section[.sub].key=value overrides."""
    tree: dict = {}
    for o in overrides:
        key, value = o.split("=", 1)
        *sections, leaf = key.split(".")
        node = tree
        for s in sections:
            node = node.setdefault(s, {})
        node[leaf] = yaml.safe_load(value)
    path.write_text(yaml.safe_dump(tree))
    return path


def run_cli(cmd: list[str], cwd) -> subprocess.CompletedProcess:
    """A command (python -m tailrl ..., torchrun ...) with this checkout importable and one thread per process."""
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]), OMP_NUM_THREADS="1")
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env, timeout=600)


def ends(text: str, head: int = 3000, tail: int = 1000) -> str:
    """A failed command's stderr for an assertion message: its start (under torchrun a rank's own traceback or
    abort message comes first) and its end (torchrun's summary of which rank failed how)."""
    return text if len(text) <= head + tail else f"{text[:head]}\n...\n{text[-tail:]}"


def jsonl_rows(path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


# -- rows in each public dataset shape (tests/data); tests never read ../shared ---------------------
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
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


# -- random paged KV caches (kernel tests) --------------------------------------------------------------
# Each sequence's keys/values and per-position queries are drawn once; its blocks are scattered over a
# shuffled pool whose unused slots (and the spare block that pads block tables) hold NaN, so any read outside
# a sequence's context shows up in the output. A batch is built from rows (seq, start, q_len), so the same
# query can be placed in batches of any composition.
class PagedCase:
    def __init__(self, lengths: list[int], block_size: int, kv_heads: int, group: int, head_dim: int,
                 dtype: torch.dtype, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        self.block_size, self.dtype, self.heads, self.head_dim = block_size, dtype, kv_heads * group, head_dim
        self.scale = 1.0 / math.sqrt(head_dim)
        need = [-(-n // block_size) for n in lengths]
        order = torch.randperm(sum(need) + 1, generator=g).tolist()
        self.spare = order.pop()
        shape = ((sum(need) + 1) * block_size, kv_heads, head_dim)
        k_pool = torch.full(shape, float("nan"))
        v_pool = torch.full(shape, float("nan"))
        self.tables: list[list[int]] = []
        self.queries: list[torch.Tensor] = []  # per sequence: (n, H, D), the query of each position
        for n, nb in zip(lengths, need):
            table = [order.pop() for _ in range(nb)]
            pos = torch.arange(n)
            slots = torch.tensor(table)[pos // block_size] * block_size + pos % block_size
            k_pool[slots] = torch.randn(n, kv_heads, head_dim, generator=g)
            v_pool[slots] = torch.randn(n, kv_heads, head_dim, generator=g)
            self.tables.append(table)
            self.queries.append(torch.randn(n, self.heads, head_dim, generator=g).to(dtype))
        self.k_pool = k_pool.to(dtype).to(DEVICE)
        self.v_pool = v_pool.to(dtype).to(DEVICE)
        self._g = g

    def batch(self, rows: list[tuple[int, int, int]], T: int | None = None):
        """rows: (seq, start, q_len) -> kwargs of paged_attention (padding tokens hold large random q)."""
        T = T if T is not None else max(1, max(n for _, _, n in rows))
        B = len(rows)
        q = (100 * torch.randn(B, T, self.heads, self.head_dim, generator=self._g)).to(self.dtype)
        width = max(len(self.tables[s]) for s, _, _ in rows) + 1
        tables = torch.full((B, width), self.spare, dtype=torch.int32)
        for b, (s, start, n) in enumerate(rows):
            q[b, :n] = self.queries[s][start:start + n]
            tables[b, : len(self.tables[s])] = torch.tensor(self.tables[s], dtype=torch.int32)
        return dict(
            q=q.to(DEVICE), k_pool=self.k_pool, v_pool=self.v_pool, block_tables=tables.to(DEVICE),
            starts=torch.tensor([r[1] for r in rows], dtype=torch.int32, device=DEVICE),
            q_lens=torch.tensor([r[2] for r in rows], dtype=torch.int32, device=DEVICE),
            block_size=self.block_size, scale=self.scale,
        )


def sampling_params(B, T, g, top=False):
    """(temperature, top_k, top_p) (B,) each at temperature T; top: top-k on every third row, top-p on every
    other one (generator g)."""
    temp = torch.full((B,), T)
    top_k = torch.zeros(B, dtype=torch.long)
    top_p = torch.ones(B)
    if top:
        top_k[1::3] = torch.randint(1, 50, (len(range(1, B, 3)),), generator=g)
        top_p[::2] = 0.5 + 0.45 * torch.rand(len(range(0, B, 2)), generator=g)
    return temp, top_k, top_p


def lm_like_logits(B, V, g, scale=3.0):
    """(B, V) random logits with a head of likely tokens, like an LM's (generator g)."""
    x = torch.randn(B, V, generator=g) * scale
    x[:, : V // 50] += 6  # a head of likely tokens, like an LM
    return x


def key_hashes(B, g):
    """(B,) int64 random 32-bit key hashes (generator g)."""
    return torch.randint(0, 2 ** 32, (B,), generator=g)


def spy_grids(monkeypatch, module, name: str) -> list:
    """Record the grid of every launch of the Triton kernel `module.name` (still launched): the list."""
    grids, real = [], getattr(module, name)

    class Spy:
        def __getitem__(self, grid):
            grids.append(grid)
            return real[grid]

    monkeypatch.setattr(module, name, Spy())
    return grids
