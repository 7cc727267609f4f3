"""Built-in tools: the calculator computes plain arithmetic exactly and refuses everything else before evaluating
it; the python sandbox bounds CPU time, memory, wall time and output, starts fresh and is deterministic."""

import os
import time

import pytest

from tailrl.tools.builtin import calculator, python
from tailrl.tools.sandbox import run_python


@pytest.mark.parametrize("expression, value", [
    ("1 + 2 * 3", "7"), ("(1 + 2) * 3", "9"), ("7 / 2", "3.5"), ("7 // 2", "3"), ("-7 // 2", "-4"), ("-7 % 3", "2"),
    ("2 ** 10", "1024"), ("2 ** -2", "0.25"), ("-3 ** 2", "-9"), ("(-3) ** 2", "9"), ("+-+4", "-4"),
    ("0.1 + 0.2", "0.30000000000000004"), ("1_000 * 3", "3000"), ("6 / 3", "2.0"), ("2.5e3 / 10", "250.0"),
    ("2 ** 4096 % 1000", str(2 ** 4096 % 1000)), ("  12  ", "12"),
])
def test_calculator_computes(expression, value):
    assert calculator(expression) == value


@pytest.mark.parametrize("expression, error", [
    ("__import__('os').system('echo hi')", "only numbers, + - * / // % ** and parentheses are allowed (found Call)"),
    ("x + 1", "(found Name)"), ("'a' * 3", "(found str)"), ("True + 1", "(found bool)"), ("1j * 2", "(found complex)"),
    ("(1).real", "(found Attribute)"), ("[1, 2]", "(found List)"), ("1 < 2", "(found Compare)"),
    ("lambda: 1", "(found Lambda)"), ("2 << 3", "operator LShift is not allowed"), ("1 / 0", "division by zero"),
    ("5 % 0", "division by zero"), ("9 ** 9 ** 9", "exponent 387420489 is larger than 10000"),
    ("2 ** 10001", "exponent 10001 is larger than 10000"), ("7 ** 2000", "would have more than 4096 bits"),
    ("(2 ** 4000) * (2 ** 4000)", "the result of * would have more than 4096 bits"),
    ("10.0 ** 400", "the result is too large"), ("1e308 * 10", "not a finite number"),
    ("(-8) ** 0.5", "not a real number"), ("1 +", "not a valid expression"), ("", "not a valid expression"),
    ("1" * 1001, "longer than 1000 characters"), ("-" * 990 + "1", "nested too deeply"),
])
def test_calculator_refuses_and_says_why(expression, error):
    start = time.perf_counter()
    answer = calculator(expression)
    assert answer.startswith("Error: ") and error in answer, answer
    assert time.perf_counter() - start < 0.5  # refused before any large computation


@pytest.mark.slow  # starts interpreters
def test_python_runs_code_and_reports_errors():
    assert python("print(sum(range(10)))") == "45"
    assert python("x = 1") == "(no output)"
    out = python("print('before')\n1 / 0")
    assert out.startswith("before\nTraceback (most recent call last):\n")
    assert 'File "<tool>", line 2' in out and out.endswith("ZeroDivisionError: division by zero")
    assert "<string>" not in out  # the sandbox's own frame is not shown
    assert python("import sys; sys.exit(0)") == "(no output)"


@pytest.mark.slow
def test_python_is_fresh_and_deterministic(monkeypatch):
    monkeypatch.setenv("TAILRL_SECRET", "parent-state")
    code = (f"import os, random, sys\nprint(os.environ.get('TAILRL_SECRET'), os.getcwd() != {os.getcwd()!r})\n"
            "print(random.random(), hash('tail'), sorted({'b', 'a', 'c'}), list({'x', 'y', 'z'}))\n"
            "print(sys.flags.no_user_site, 'tailrl' in sys.modules)")
    first = run_python(code)
    assert first.splitlines()[0] == "None True" and first.splitlines()[2] == "1 False"
    assert run_python(code) == first  # same seed, same hash seed: same text


@pytest.mark.slow
def test_python_cpu_time_limit():
    start = time.monotonic()
    out = run_python("print('spinning', flush=True)\nwhile True:\n    pass", cpu_s=1, wall_s=20)
    assert out == "spinning\n[killed: CPU time limit of 1 s]"
    assert time.monotonic() - start < 10


@pytest.mark.slow
def test_python_memory_limit():
    out = run_python("x = bytearray(2 * 1024 ** 3)\nprint('allocated')", memory_mb=256)
    assert "MemoryError" in out and "allocated" not in out


@pytest.mark.slow
def test_python_wall_time_limit_kills_its_children_too():
    start = time.monotonic()
    code = ("import subprocess, sys, time\n"
            "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
            "print(child.pid, flush=True)\ntime.sleep(60)")
    out = run_python(code, wall_s=1.0)
    assert time.monotonic() - start < 10
    pid_line, note = out.splitlines()
    assert note == "[killed: wall time limit of 1 s]"
    assert _dead(int(pid_line))  # the whole process group was killed


def _dead(pid: int) -> bool:
    """Gone, or a zombie waiting for its (re)parent to reap it (a container's init may never do that)."""
    for _ in range(50):
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.1)
    return False


@pytest.mark.slow
def test_python_output_is_truncated():
    out = run_python("print('x' * 100000)\nimport sys\nsys.stderr.write('e' * 100000)", max_output_chars=1000)
    assert out.startswith("x" * 1000 + "\n" + "e" * 1000)
    assert out.endswith("\n[output truncated]") and len(out) < 2100
    flood = run_python("while True:\n    print('y' * 1000)", max_output_chars=50, wall_s=1.0, cpu_s=1)
    assert flood.startswith("y" * 50 + "\n[output truncated]\n[killed: ")  # drained, never held in memory
