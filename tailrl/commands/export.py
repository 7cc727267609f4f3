"""`tailrl export RUN_DIR --out DIR [--merge] [--step N]`: a run's trained policy as a folder other tools load.

A LoRA run (model.lora) exports its PEFT adapter (`peft.PeftModel.from_pretrained(base, DIR)`), or with --merge
the base with the adapter merged in, W + (alpha / r) B A in the run's dtype: the very weights its engine ran, as
a plain Hugging Face folder transformers loads. A full fine-tune's checkpoint is already such a folder; it is
copied (--merge changes nothing there)."""

from __future__ import annotations

from tailrl.errors import UserError


def add(sub) -> None:
    p = sub.add_parser("export", help="a run's checkpoint as a PEFT adapter folder (LoRA runs) or, with --merge, "
                       "a merged Hugging Face model folder")
    p.set_defaults(run=run_export)
    p.add_argument("run_dir", metavar="RUN_DIR", help="a training run directory (with checkpoints/)")
    p.add_argument("--out", required=True, help="the folder to write (must not exist, or be empty)")
    p.add_argument("--merge", action="store_true", help="LoRA: the base with the adapter merged in, a plain HF folder")
    p.add_argument("--step", type=int, default=None, help="the checkpoint of step N (default: the latest)")


def run_export(a) -> int:
    # lazy: the CLI imports a command's stack only when the command runs (torch stays out of --help)
    import json
    import shutil
    from pathlib import Path

    from tailrl.config import load_config
    from tailrl.model import load
    from tailrl.model.loading import resolve_dtype, save_hf
    from tailrl.model.lora import attach
    from tailrl.model.peft_format import check_base, load_adapter_state, read_adapter
    from tailrl.train.checkpoint import checkpoint_dir, latest_checkpoint

    run, out = Path(a.run_dir), Path(a.out)
    if not (run / "checkpoints").is_dir():
        raise UserError(f"{run} is not a run directory (no checkpoints/)")
    ckpt = latest_checkpoint(run) if a.step is None else checkpoint_dir(run, a.step)
    if ckpt is None or not (ckpt / "state.json").is_file():
        steps = sorted(int(p.name.split("-")[1]) for p in (run / "checkpoints").glob("step-*")
                       if (p / "state.json").is_file())
        raise UserError(f"{run} has no complete checkpoint{f' of step {a.step}' if a.step is not None else ''}; "
                        f"steps: {', '.join(map(str, steps)) or 'none'}")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"--out {out} exists and is not an empty folder")
    if not (ckpt / "adapter").is_dir():  # a full fine-tune: model/ is the merged HF folder already
        shutil.copytree(ckpt / "model", out, dirs_exist_ok=True)
        print(f"{out}: the Hugging Face model of {ckpt.name} (a full fine-tune{'; --merge changes nothing' if a.merge else ''})")
        return 0
    if not a.merge:
        shutil.copytree(ckpt / "adapter", out, dirs_exist_ok=True)
        print(f"{out}: the PEFT adapter of {ckpt.name} (peft.PeftModel.from_pretrained(base, '{out}'))")
        return 0
    cfg = load_config(run / "config.yaml")
    hf_config = json.loads((ckpt / "base_config.json").read_text())
    spec, tensors = read_adapter(ckpt / "adapter")
    model, tok = load(cfg.model.path, dtype="float32", device="cpu")  # as the trainer loads it, then cast
    where = f"the adapter of {ckpt}"
    check_base(spec, tensors, model, where)
    attach(model, spec, resolve_dtype(hf_config.get("torch_dtype", "float32")))
    load_adapter_state(model, tensors, where)  # merged as the trainer merges: the engine's weights, bit for bit
    save_hf(model, out, tokenizer=tok, hf_config=hf_config)
    print(f"{out}: {cfg.model.path} with the adapter of {ckpt.name} merged ({hf_config.get('torch_dtype')})")
    return 0
