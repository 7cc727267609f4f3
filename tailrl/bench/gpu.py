"""`tailrl bench gpu`: every GPU figure in one command, part by part (bench/gpu_parts.py), each under its
own time budget, each result written the moment it is known — so a run cut off keeps what it got, and a
second call with the same --out continues where the first stopped (a lent GPU runs at most 10 minutes a
command).

Files in --out:
    summary.md / summary.json    every part: status (ok | failed | timeout | skipped), wall time, budget, why
    <part>/part.json, part.md    the part's runs: command, return code, wall time, the bench's own result
    <part>/<run>/...             what the bench wrote (result.json, summary.md, plots), and log.txt
--pack FILE.tgz bundles the small files (results, tables, logs; no checkpoints) after every part, for a
machine that returns only a few files.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tarfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import torch

from tailrl.bench.gpu_parts import Part, Run, parts

DONE = ("ok", "failed", "timeout")   # a part in one of these states is not run again without --redo
MIN_S = 20.0                         # a part gets at least this much of the budget, or is left for the next call
PACK_SUFFIXES = {".json", ".md", ".txt", ".xml", ".png", ".jsonl", ".csv", ".yaml"}
PACK_FILE_MAX = 2 << 20


def _junit(path: Path) -> dict | None:
    """pytest's JUnit XML -> counts and the failing tests' names."""
    if not path.is_file():
        return None
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root)
    count = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
    failing = [f"{c.get('classname')}::{c.get('name')}" for s in suites for c in s
               if c.find("failure") is not None or c.find("error") is not None]
    return {**count, "passed": count["tests"] - count["failures"] - count["errors"] - count["skipped"],
            "failing": failing[:40]}


def _bench_result(out: Path) -> dict | None:
    """What the bench wrote: result.json, else the partial results of a run cut short."""
    for name in ("result.json", "partial.json"):
        if (out / name).is_file():
            try:
                return {"file": name, **json.loads((out / name).read_text())}
            except json.JSONDecodeError:
                return {"file": name, "unreadable": True}
    return None


def run_one(run: Run, out: Path, timeout_s: float) -> dict:
    """One command in its own process group (killed whole at the timeout); its output in out/log.txt."""
    out.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", *[a.replace("{out}", str(out)) for a in run.argv]]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **run.env}
    t0 = time.perf_counter()
    with open(out / "log.txt", "w") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            rc = proc.wait(timeout=max(timeout_s, 1.0))
            status = "ok" if rc == 0 else "failed"
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            rc, status = proc.wait(), "timeout"
    wall = time.perf_counter() - t0
    tail = (out / "log.txt").read_text(errors="replace")[-3000:]
    res = {"label": run.label, "command": " ".join(["python", *argv[1:]]), "env": run.env, "status": status,
           "returncode": rc, "wall_s": round(wall, 2), "timeout_s": round(timeout_s, 1),
           "result": _bench_result(out), "tests": _junit(out / "junit.xml"), "log_tail": tail}
    return res


def run_part(part: Part, out: Path, budget_s: float) -> dict:
    """The part's runs in order, sharing its budget; part.json and part.md written when it ends."""
    t0, runs = time.perf_counter(), []
    for run in part.runs:
        left = budget_s - (time.perf_counter() - t0)
        if left < 1.0:
            runs.append({"label": run.label, "status": "skipped", "reason": "the part's budget was spent"})
            continue
        runs.append(run_one(run, out / run.label, left))
    states = [r["status"] for r in runs]
    status = next((s for s in ("timeout", "failed") if s in states), "ok")
    res = {"name": part.name, "what": part.what, "status": status, "budget_s": round(budget_s, 1),
           "wall_s": round(time.perf_counter() - t0, 2), "note": part.note, "runs": runs,
           "finished": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
    (out / "part.json").write_text(json.dumps(res, indent=1, default=str))
    (out / "part.md").write_text(part_markdown(res, out))
    return res


def part_markdown(res: dict, out: Path) -> str:
    lines = [f"## {res['name']}: {res['status']} ({res['wall_s']:.0f} s of {res['budget_s']:.0f} s)", "",
             res["what"], ""]
    if res.get("note"):
        lines += [f"Left out: {res['note']}", ""]
    for r in res["runs"]:
        lines += [f"### {r['label']}: {r['status']}" + (f" ({r['wall_s']:.1f} s)" if "wall_s" in r else ""), ""]
        if "command" in r:
            env = " ".join(f"{k}={v}" for k, v in r["env"].items())
            lines += [f"`{(env + ' ') if env else ''}{r['command']}`", ""]
        if r.get("tests"):
            t = r["tests"]
            lines += [f"{t['passed']} passed, {t['failures']} failed, {t['errors']} errors, {t['skipped']} skipped",
                      *[f"- {n}" for n in t["failing"]], ""]
        summary = out / r["label"] / "summary.md"
        if summary.is_file():
            lines += [summary.read_text().strip(), ""]
        elif r.get("status") in ("failed", "timeout"):
            lines += ["```", r.get("log_tail", "")[-1500:].strip(), "```", ""]
        elif r.get("reason"):
            lines += [r["reason"], ""]
    return "\n".join(lines).rstrip() + "\n"


def summary_markdown(s: dict) -> str:
    lines = [f"# tailrl bench gpu — {s['device']}", "",
             f"{s['started']}; torch {s['torch']}, triton {s['triton']}; {'dry run (CPU, tiny sizes)' if s['dry_run'] else 'full sizes'}; "
             f"budget {s['budget_s']:.0f} s, used {s['wall_s']:.0f} s", "",
             "| part | status | wall s | budget s | what / why |", "|---|---|---|---|---|"]
    for p in s["parts"]:
        why = p.get("reason") or p.get("note") or p.get("what", "")
        lines.append(f"| {p['name']} | {p['status']} | {p.get('wall_s', 0):.0f} | {p.get('budget_s', 0):.0f} | {why} |")
    return "\n".join(lines) + "\n"


def pack(out: Path, dest: Path) -> None:
    """The small files of out/ (results, tables, logs, plots) into one .tgz; checkpoints stay behind."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".tmp")
    with tarfile.open(tmp, "w:gz") as tar:
        for f in sorted(out.rglob("*")):
            if f.is_file() and f.suffix in PACK_SUFFIXES and f.stat().st_size <= PACK_FILE_MAX:
                tar.add(f, arcname=str(Path(out.name) / f.relative_to(out)))
    tmp.replace(dest)


def _versions() -> dict:
    try:
        # lazy: Triton is optional (the gpu extra); the versions line names it only where it is installed
        import triton
        tv = triton.__version__
    except ImportError:
        tv = None
    dev = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "CPU (no CUDA device)"
    return {"device": dev, "torch": torch.__version__, "triton": tv}


def run_gpu_bench(out_dir: str, budget_min: float = 25.0, only: list[str] | None = None, dry: bool = False,
                  redo: bool = False, pack_to: str | None = None, part_list: list[Part] | None = None) -> dict:
    """Run the parts (all, or `only`) in order within budget_min minutes; skip parts a previous call with
    the same out_dir finished (unless redo). Returns the summary (also in out_dir/summary.{json,md})."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    todo = part_list if part_list is not None else parts(dry)
    t0, budget_s = time.perf_counter(), budget_min * 60.0
    summary = {**_versions(), "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "dry_run": dry,
               "budget_s": budget_s, "wall_s": 0.0, "command": " ".join(sys.argv), "parts": []}

    def write() -> None:
        summary["wall_s"] = round(time.perf_counter() - t0, 1)
        (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
        (out / "summary.md").write_text(summary_markdown(summary))
        if pack_to:
            pack(out, Path(pack_to))

    for part in todo:
        prev = out / part.name / "part.json"
        if only and part.name not in only:
            summary["parts"].append({"name": part.name, "status": "skipped", "reason": "not in --only"})
            continue
        if prev.is_file() and not redo:
            old = json.loads(prev.read_text())
            if old.get("status") in DONE:
                summary["parts"].append({**{k: old[k] for k in ("name", "status", "wall_s", "budget_s", "what")},
                                         "reason": f"done by an earlier call ({old.get('finished')}); --redo runs it again"})
                continue
        left = budget_s - (time.perf_counter() - t0)
        if not part.runs:
            summary["parts"].append({"name": part.name, "status": "skipped", "budget_s": part.budget_s,
                                     "reason": part.note})
            continue
        if left < min(MIN_S, part.budget_s):
            summary["parts"].append({"name": part.name, "status": "skipped", "budget_s": part.budget_s,
                                     "reason": f"budget spent ({left:.0f} s left): run again with the same --out"})
            write()
            continue
        print(f"[bench gpu] {part.name}: up to {min(part.budget_s, left):.0f} s — {part.what}", flush=True)
        res = run_part(part, out / part.name, min(part.budget_s, left))
        summary["parts"].append({k: res[k] for k in ("name", "status", "wall_s", "budget_s", "what", "note")})
        print(f"[bench gpu] {part.name}: {res['status']} in {res['wall_s']:.0f} s", flush=True)
        write()
    write()
    return summary
