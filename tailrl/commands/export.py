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
    import shutil
    from pathlib import Path

    from tailrl.config import load_config
    from tailrl.model.loading import save_hf
    from tailrl.train.checkpoint import checkpoint_dir, latest_checkpoint
    from tailrl.train.lora_checkpoint import is_lora_checkpoint, merged_policy

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
    if not is_lora_checkpoint(ckpt):  # a full fine-tune: model/ is the merged HF folder already
        shutil.copytree(ckpt / "model", out, dirs_exist_ok=True)
        print(f"{out}: the Hugging Face model of {ckpt.name} (a full fine-tune{'; --merge changes nothing' if a.merge else ''})")
        return 0
    if not a.merge:
        shutil.copytree(ckpt / "adapter", out, dirs_exist_ok=True)
        print(f"{out}: the PEFT adapter of {ckpt.name} (peft.PeftModel.from_pretrained(base, '{out}'))")
        return 0
    model, tok, hf_config = merged_policy(run, ckpt)
    save_hf(model, out, tokenizer=tok, hf_config=hf_config)
    base = load_config(run / "config.yaml").model.path
    print(f"{out}: {base} with the adapter of {ckpt.name} merged ({hf_config.get('torch_dtype')})")
    return 0
