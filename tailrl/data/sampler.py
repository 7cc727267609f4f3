"""Which prompts each step trains on: an endless, seeded, resumable walk over a PromptDataset.

The trainer asks for P = B // G prompts per step, and P changes when SAGC changes G, so the sampler
hands out any number of examples and wraps across epochs instead of yielding fixed batches. Epoch e
visits the dataset in the order of a permutation seeded by (seed + e), so the whole sequence is a
function of (seed, shuffle, dataset size) and the state is two integers: resuming from
state_dict() continues exactly where the interrupted run would have gone.

A request that spans an epoch boundary (always, when n > len(dataset)) can contain the same prompt
twice: the end of one epoch and the start of the next.
"""

from __future__ import annotations

import random

from tailrl.data.datasets import Example, PromptDataset
from tailrl.errors import UserError


def epoch_order(size: int, seed: int, epoch: int, shuffle: bool = True) -> list[int]:
    """Indices into the dataset for one epoch; random.Random's shuffle is stable across Python versions."""
    order = list(range(size))
    if shuffle:
        random.Random(seed + epoch).shuffle(order)
    return order


class PromptSampler:
    def __init__(self, dataset: PromptDataset, seed: int = 0, shuffle: bool = True):
        if not dataset.examples:
            raise ValueError("PromptSampler needs a non-empty dataset")
        self.dataset = dataset
        self.seed = seed
        self.shuffle = shuffle
        self.epoch = 0
        self.position = 0  # next index into the current epoch's order
        self._order = epoch_order(len(dataset.examples), seed, 0, shuffle)

    def next(self, n: int) -> list[Example]:
        """The next n examples, wrapping into a freshly shuffled epoch as often as needed."""
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        out: list[Example] = []
        while len(out) < n:
            if self.position == len(self._order):
                self._set_epoch(self.epoch + 1)
            take = self._order[self.position:self.position + n - len(out)]
            out.extend(self.dataset.examples[i] for i in take)
            self.position += len(take)
        return out

    def _set_epoch(self, epoch: int) -> None:
        self.epoch, self.position = epoch, 0
        self._order = epoch_order(len(self.dataset.examples), self.seed, epoch, self.shuffle)

    def state_dict(self) -> dict:
        """JSON-able; size guards against resuming over a different dataset."""
        return {"epoch": self.epoch, "position": self.position, "seed": self.seed, "shuffle": self.shuffle,
                "size": len(self.dataset.examples)}

    def load_state_dict(self, d: dict) -> None:
        """Exact resume: the saved seed and shuffle win over the constructor's (they define the sequence)."""
        size = len(self.dataset.examples)
        if d.get("size", size) != size:
            raise UserError(f"the checkpoint's prompt sampler walked a dataset of {d['size']} rows; this one has "
                            f"{size} (same data.source, data.limit and data.on_bad_row are needed to resume)")
        if not 0 <= d["position"] <= size or d["epoch"] < 0:
            raise UserError(f"invalid prompt sampler state {d}")
        self.seed, self.shuffle = int(d.get("seed", self.seed)), bool(d.get("shuffle", self.shuffle))
        self._set_epoch(int(d["epoch"]))
        self.position = int(d["position"])
