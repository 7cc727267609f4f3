"""Tensor-parallel models from full weights, and resharding between layouts without a restart.

    sharded(args, named_tensors, tp)  a CausalLM holding this rank's shards (weight loaders slice)
    reshard(model, tp)                the same weights under another TP context, streamed layer by
                                      layer: all-gather each tensor over the old TP group, slice it
                                      for the new one (PAT §4.3) — at most one full tensor in flight
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from tailrl.model.args import ModelArgs
from tailrl.model.decoder import CausalLM
from tailrl.model.layers import TPContext
from tailrl.model.weights import full_tensors, load_weights


def sharded(args: ModelArgs, named_tensors: Iterable[tuple[str, torch.Tensor]], tp: TPContext,
            dtype: torch.dtype = torch.float32, device: str = "cpu") -> CausalLM:
    with torch.device(device):
        model = CausalLM(args, tp).to(dtype)
    load_weights(model, named_tensors)
    return model.eval()


def reshard(model: CausalLM, tp: TPContext) -> CausalLM:
    """model's weights re-split for `tp` (collective over the model's current TP group)."""
    p = next(model.parameters())
    return sharded(model.args, full_tensors(model), tp, p.dtype, str(p.device))
