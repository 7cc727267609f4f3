"""Finished runs of a long benchmark kept on disk, so that the same command started again continues where a
stopped one ended (an hours-long `tailrl bench exactness` on a real model, cut by a session's end or a
preemption, loses only the run it was in).

A cache is one folder per digest of the settings and the machine (CPU model, torch's build: its BLAS
libraries and versions, the CUDA device): runs with different settings or on another machine never mix. Each
finished run is one JSON file (its rollouts and its info dict), written atomically, with the digests of the
files that could have decided its tokens (bench/code_digest.py), taken when the cache is opened, before the
runs: a kept run is used only while each of those files is unchanged, so a change to the trainer or a command
does not throw away hours of kept rollouts and a change to the engine, the model, the sampler or the requests
does (and the git commit, for the notes)."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
from dataclasses import asdict
from pathlib import Path

import torch

from tailrl.bench.code_digest import code_files, same_code
from tailrl.engine import Rollout


def settings_digest(settings: dict) -> str:
    """12 hex digits of the settings (JSON, sorted keys; non-JSON values by str)."""
    return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:12]


def machine() -> dict:
    """What besides the settings decides a run's bits: the CPU model, torch's build (BLAS / oneDNN versions,
    ISA), the CUDA device."""
    cpu = platform.processor()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"cpu": cpu, "machine": platform.machine(), "torch_build": torch.__config__.show(),
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "cuda": torch.cuda.get_device_name() if torch.cuda.is_available() else None}


def git_commit() -> str | None:
    """HEAD of the repository this package runs from (None outside a git checkout)."""
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=Path(__file__).parent,
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() or None


class RunCache:
    """get / put finished runs under folder/<digest of settings>/. folder None: a cache that keeps nothing."""

    def __init__(self, folder: str | Path | None, settings: dict):
        settings = {**settings, "machine": machine()}
        self.dir = Path(folder) / f"runs-{settings_digest(settings)}" if folder is not None else None
        self.commit, self.files = git_commit(), code_files()
        if self.dir is not None:
            self.dir.mkdir(parents=True, exist_ok=True)
            (self.dir / "settings.json").write_text(json.dumps(settings, indent=1, sort_keys=True, default=str))

    def _path(self, name: str) -> Path:
        return self.dir / (hashlib.sha256(name.encode()).hexdigest()[:16] + ".json")

    def get(self, name: str) -> tuple[list[Rollout], dict] | None:
        """(rollouts, info) of a finished run called `name` by this code, or None."""
        if self.dir is None or not self._path(name).exists():
            return None
        d = json.loads(self._path(name).read_text())
        if d.get("name") != name or not same_code(d.get("files") or {}):
            return None
        return [Rollout(**r) for r in d["rollouts"]], {**d["info"], "cached_from_commit": d.get("commit")}

    def put(self, name: str, rollouts: list[Rollout], info: dict) -> None:
        if self.dir is None:
            return
        path = self._path(name)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"name": name, "commit": self.commit, "files": self.files, "info": info,
                                   "rollouts": [asdict(r) for r in rollouts]}))
        os.replace(tmp, path)
