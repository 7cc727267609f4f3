"""`tailrl bench gpu`: budgets, statuses, resumption across calls, the pack, and (slow) the whole harvest's
dry run on the CPU with every part's real command."""

import json
import subprocess
import sys
import tarfile
import time

import pytest

from tailrl.bench.gpu import pack, run_gpu_bench
from tailrl.bench.gpu_parts import PART_NAMES, Part, Run, parts


def _py(label: str, code: str) -> Run:
    return Run(label, ("timeit", "-n", "1", "-r", "1", code))


def _fake_parts() -> list[Part]:
    return [Part("good", 30, "succeeds", (_py("a", "pass"), _py("b", "pass"))),
            Part("bad", 30, "exits 1", (_py("x", "raise SystemExit(1)"),)),
            Part("slow", 2, "outlives its budget", (_py("s", "import time; time.sleep(60)"),))]


def test_statuses_budgets_and_files(tmp_path):
    t0 = time.perf_counter()
    s = run_gpu_bench(str(tmp_path / "out"), dry=True, part_list=_fake_parts(), pack_to=str(tmp_path / "r.tgz"))
    assert time.perf_counter() - t0 < 30  # the sleeping part was killed at its 2 s budget
    assert [(p["name"], p["status"]) for p in s["parts"]] == [("good", "ok"), ("bad", "failed"), ("slow", "timeout")]
    out = tmp_path / "out"
    assert json.loads((out / "summary.json").read_text())["parts"] == s["parts"]
    good = json.loads((out / "good" / "part.json").read_text())
    assert [r["label"] for r in good["runs"]] == ["a", "b"] and all(r["returncode"] == 0 for r in good["runs"])
    assert "| slow | timeout |" in (out / "summary.md").read_text()
    with tarfile.open(tmp_path / "r.tgz") as tar:
        names = set(tar.getnames())
    assert {"out/summary.md", "out/summary.json", "out/bad/part.json", "out/bad/x/log.txt"} <= names


def test_a_second_call_continues_where_the_first_stopped(tmp_path):
    out = str(tmp_path / "out")
    two = [_fake_parts()[0], Part("later", 30, "", (_py("l", "pass"),))]
    spent = run_gpu_bench(out, budget_min=1 / 60, dry=True, part_list=two)  # 1 s: less than any part's minimum
    assert [p["status"] for p in spent["parts"]] == ["skipped", "skipped"]
    assert "budget spent" in spent["parts"][0]["reason"] and "same --out" in spent["parts"][0]["reason"]
    first = run_gpu_bench(out, dry=True, only=["good"], part_list=two)
    assert [p["status"] for p in first["parts"]] == ["ok", "skipped"] and first["parts"][1]["reason"] == "not in --only"
    second = run_gpu_bench(out, dry=True, part_list=two)
    assert [p["status"] for p in second["parts"]] == ["ok", "ok"]
    assert "done by an earlier call" in second["parts"][0]["reason"] and second["parts"][1]["wall_s"] > 0
    again = run_gpu_bench(out, dry=True, redo=True, part_list=two)
    assert all("reason" not in p for p in again["parts"])


def test_junit_counts_reach_the_part(tmp_path):
    xml = ('<testsuites><testsuite tests="3" failures="1" errors="0" skipped="1">'
           '<testcase classname="t" name="ok"/><testcase classname="t" name="bad"><failure/></testcase>'
           '<testcase classname="t" name="sk"><skipped/></testcase></testsuite></testsuites>')
    code = f"open(r'{tmp_path}/o/p/r/junit.xml', 'w').write('{xml}')"
    s = run_gpu_bench(str(tmp_path / "o"), dry=True, part_list=[Part("p", 30, "", (_py("r", code),))])
    t = json.loads((tmp_path / "o" / "p" / "part.json").read_text())["runs"][0]["tests"]
    assert s["parts"][0]["status"] == "ok"
    assert (t["passed"], t["failures"], t["skipped"], t["failing"]) == (1, 1, 1, ["t::bad"])


def test_pack_keeps_results_and_leaves_checkpoints(tmp_path):
    (tmp_path / "o" / "run").mkdir(parents=True)
    (tmp_path / "o" / "run" / "result.json").write_text("{}")
    (tmp_path / "o" / "run" / "model.safetensors").write_bytes(b"0" * 100)
    pack(tmp_path / "o", tmp_path / "p.tgz")
    with tarfile.open(tmp_path / "p.tgz") as tar:
        assert tar.getnames() == ["o/run/result.json"]


def test_parts_are_named_and_budgeted_as_documented():
    for dry in (True, False):
        ps = parts(dry)
        assert tuple(p.name for p in ps) == PART_NAMES
        assert sum(p.budget_s for p in ps) <= 25 * 60
        assert all(p.runs for p in ps)  # run from the repository's root: the tests part has its files


def test_every_full_size_command_parses():
    """The full-size commands run only on a GPU: their arguments are checked here against the real parser."""
    from tailrl.cli import build_parser

    parser = build_parser()
    for p in parts(dry=False):
        for r in p.runs:
            if r.argv[0] == "tailrl":
                a = parser.parse_args([x.replace("{out}", "o") for x in r.argv[1:]])
                assert a.command == "bench", r.argv


def test_cli_refuses_unknown_parts_and_a_full_run_without_cuda(tmp_path):
    r = subprocess.run([sys.executable, "-m", "tailrl", "bench", "gpu", "--only", "nope", "--out", str(tmp_path)],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "not a part" in r.stderr
    import torch

    if not torch.cuda.is_available():
        r = subprocess.run([sys.executable, "-m", "tailrl", "bench", "gpu", "--out", str(tmp_path)],
                           capture_output=True, text=True)
        assert r.returncode == 2 and "--dry-run" in r.stderr


def test_e2e_task_names_on_the_command_line_are_the_registry():
    from tailrl.bench.e2e_tasks import TASKS
    from tailrl.commands.bench import E2E_TASKS

    assert tuple(TASKS) == E2E_TASKS


@pytest.mark.slow
def test_dry_run_runs_every_part_on_the_cpu(tmp_path):
    """The harvest's real commands at tiny sizes: every part ends ok and writes its files."""
    out = tmp_path / "gpu"
    r = subprocess.run([sys.executable, "-m", "tailrl", "bench", "gpu", "--dry-run", "--out", str(out),
                        "--pack", str(tmp_path / "gpu.tgz")], capture_output=True, text=True, timeout=900)
    s = json.loads((out / "summary.json").read_text())
    assert [(p["name"], p["status"]) for p in s["parts"]] == [(n, "ok") for n in PART_NAMES], r.stdout[-3000:]
    assert r.returncode == 0
    for name in PART_NAMES:
        assert (out / name / "part.md").is_file()
    assert (out / "engine" / "engine" / "result.json").is_file()
    assert json.loads((out / "tests" / "part.json").read_text())["runs"][0]["tests"]["passed"] > 0
