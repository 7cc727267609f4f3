"""Unit tests of tools/gpu_kit.py (the offline GPU-machine kit) and tools/gpu_kit_install.sh.

No network and no ../shared: wheels are built here as tiny zip files, and install.sh installs one fake wheel
with this machine's python (pip --no-index).
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("gpu_kit", ROOT / "tools" / "gpu_kit.py")
gk = importlib.util.module_from_spec(_spec)
sys.modules["gpu_kit"] = gk  # dataclasses look their module up while the class is made
_spec.loader.exec_module(gk)


def make_wheel(folder: Path, name: str, version: str, requires=(), files=None) -> Path:
    """A small but valid py3-none-any wheel (METADATA, WHEEL, RECORD with hashes) that pip can install."""
    dist = f"{name.replace('-', '_')}-{version}"
    files = dict(files or {f"{name.replace('-', '_')}/__init__.py": f"VERSION = {version!r}\n"})
    files[f"{dist}.dist-info/METADATA"] = "".join(
        [f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"] + [f"Requires-Dist: {r}\n" for r in requires])
    files[f"{dist}.dist-info/WHEEL"] = "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    files[f"{dist}.dist-info/RECORD"] = "\n".join(record + [f"{dist}.dist-info/RECORD,,"]) + "\n"
    out = folder / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(out, "w") as z:
        for path, text in files.items():
            z.writestr(path, text)
    return out


def test_normalize_names():
    assert gk.normalize("Huggingface_Hub") == "huggingface-hub"
    assert gk.normalize("latex2sympy2.extended") == "latex2sympy2-extended"
    assert gk.normalize("A__b-.-C") == "a-b-c"


def test_image_list_and_never_download():
    assert gk.IMAGE_PACKAGES_DATE == "2026-11-17"
    assert gk.IMAGE_PACKAGES_SOURCE == "/work/.library/device/KINDS.md"
    assert {"transformers", "peft", "accelerate", "pyarrow", "huggingface-hub"} <= gk.IMAGE_PACKAGES
    for name in ("torch", "Triton", "nvidia-cublas", "nvidia_nccl_cu13", "PyYAML", "huggingface_hub"):
        assert gk.in_image(name), name
    for name in ("trl", "datasets", "gguf", "math_verify", "antlr4-python3-runtime", "dill"):
        assert not gk.in_image(name), name
    assert all(n == gk.normalize(n) for n in gk.IMAGE_PACKAGES)


def test_wanted_requirements_markers_and_extras():
    lines = [
        "numpy>=1.17",
        "tomli>=1.1; python_version < '3.11'",
        "uvloop; sys_platform == 'win32'",
        "harbor>=0.13; python_version >= '3.12' and extra == 'harbor'",
        "PySide6 (>=6.9,<7.0) ; (python_version >= \"3.9\" and python_version < \"3.14\") and (extra == \"gui\")",
        "antlr4-python3-runtime==4.13.2; extra == 'antlr4-13-2'",
        "pytest; extra == 'test'",
        "typing-extensions; python_version < '3.13'",
    ]
    names = lambda reqs: sorted(r.name for r in reqs)  # noqa: E731
    assert names(gk.wanted_requirements(lines, {""})) == ["numpy", "typing-extensions"]
    assert names(gk.wanted_requirements(lines, {"gui"})) == ["PySide6"]  # base lines only with ''
    assert names(gk.wanted_requirements(lines, {"antlr4_13_2"})) == ["antlr4-python3-runtime"]  # normalised
    assert names(gk.wanted_requirements(lines, {"", "harbor", "test"})) == [
        "harbor", "numpy", "pytest", "typing-extensions"]
    assert gk.wanted_requirements(lines, set()) == []


def test_wheel_fits_target():
    ok = ["trl-1.16.0-py3-none-any.whl", "multiprocess-0.70.19-py312-none-any.whl",
          "x-1.0-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
          "y-1.0-cp39-abi3-manylinux_2_28_x86_64.whl"]
    bad = ["x-1.0-cp311-cp311-manylinux_2_17_x86_64.whl", "x-1.0-cp312-cp312-manylinux_2_17_aarch64.whl",
           "x-1.0-cp312-cp312-musllinux_1_2_x86_64.whl", "x-1.0-cp312-cp312-win_amd64.whl",
           "x-1.0-py311-none-any.whl", "x-1.0-cp313-abi3-manylinux_2_28_x86_64.whl"]
    assert all(gk.wheel_fits_target(w) for w in ok)
    assert not any(gk.wheel_fits_target(w) for w in bad)
    assert [gk.wheel_kind(w) for w in ok] == ["py3", "py312", "binary", "binary"]


def test_incompatibilities_against_known_image_versions(tmp_path):
    new = gk.WheelInfo(tmp_path / "trl.whl", "trl", "9.0", ["transformers>=5.20", "accelerate>=1.0", "datasets"])
    old = gk.WheelInfo(tmp_path / "trl.whl", "trl", "1.16.0", ["transformers>=4.56.2", "vllm; extra == 'vllm'"])
    assert gk.incompatibilities(new) == ["trl 9.0 needs transformers>=5.20, image has 5.17.0"]
    assert gk.incompatibilities(old) == []
    assert gk.incompatibilities(old, {"transformers": "4.50"}) != []


def test_resolve_closure_skips_image_and_follows_extras(tmp_path):
    wheels = {
        "app": make_wheel(tmp_path, "app", "1.0", ["numpy>=1.2", "lib[fast]>=2", "opt; extra == 'e2e'",
                                                   "never; extra == 'dev'"]),
        "lib": make_wheel(tmp_path, "lib", "2.1", ["lib[self]; extra == 'fast'", "fastdep; extra == 'self'",
                                                   "win-only; sys_platform == 'win32'"]),
        "opt": make_wheel(tmp_path, "opt", "0.3", ["torch>=2.4", "nvidia-cublas"]),
        "fastdep": make_wheel(tmp_path, "fastdep", "1.0", ["lib<2"]),  # a clash with the chosen lib 2.1
    }
    asked = []

    def fetch(name, spec):
        asked.append(name)
        return gk.read_wheel(wheels[name]) if name in wheels and spec.contains(
            gk.read_wheel(wheels[name]).version) else None

    res = gk.resolve(["app[e2e]", "missing>=1"], fetch)
    assert sorted(res.chosen) == ["app", "fastdep", "lib", "opt"]
    assert sorted(asked) == ["app", "fastdep", "lib", "missing", "opt"]  # once each; never torch/nvidia/numpy
    assert ("numpy", ">=1.2", "app") in res.needs and ("torch", ">=2.4", "opt") in res.needs
    assert any("missing>=1" in p for p in res.problems)
    assert any("fastdep needs lib<2" in p for p in res.problems)


def test_fetcher_uses_cache_and_skips_incompatible(tmp_path):
    make_wheel(tmp_path, "trl", "9.0", ["transformers>=6"])
    make_wheel(tmp_path, "trl", "1.16.0", ["transformers>=4.56"])
    fetch = gk.PipFetcher(tmp_path, python="/nonexistent/python")  # any pip call would fail
    info = fetch("trl", SpecifierSet(">=1.0"))
    assert info is not None and info.version == "1.16.0"
    assert any("trl 9.0 needs transformers>=6" in line for line in fetch.log)


def test_part_plan_split_and_rejoin(tmp_path):
    data = os.urandom(1000)
    src = tmp_path / "a.tar"
    src.write_bytes(data)
    for cap in (1, 7, 300, 999, 1000, 5000):
        plan = gk.part_plan(len(data), cap)
        assert sum(plan) == len(data) and max(plan) <= cap and max(plan) - min(plan) <= 1
        assert len(plan) == -(-len(data) // cap)
    out = tmp_path / "kit"
    out.mkdir()
    (out / "a.tar.part09").write_bytes(b"stale")
    parts = gk.split_file(src, 300, out)
    assert [p.name for p in parts] == [f"a.tar.part{i:02d}" for i in range(4)]
    assert sorted(p.name for p in out.iterdir()) == [p.name for p in parts]  # the stale part is gone
    assert all(p.stat().st_size <= 300 for p in parts)
    assert b"".join(p.read_bytes() for p in parts) == data


def test_split_fails_loudly_over_the_cap(tmp_path, monkeypatch):
    src = tmp_path / "big.tar"
    src.write_bytes(b"x" * 100)
    monkeypatch.setattr(gk, "part_plan", lambda size, cap: [size])
    with pytest.raises(SystemExit, match="over the 10 B cap"):
        gk.split_file(src, 10, tmp_path)


def test_plan_calls_respects_budget_and_slots():
    parts = [("d.part00", 3), ("m.part00", 45), ("m.part01", 45), ("s.part00", 1)]
    assert gk.plan_calls(parts, 61) == [["d.part00", "m.part00"], ["m.part01", "s.part00"]]
    assert gk.plan_calls(parts, 100, slots=1) == [[n] for n, _ in parts]
    with pytest.raises(SystemExit):
        gk.plan_calls([("huge", 62)], 61)


def test_make_tar_is_deterministic(tmp_path):
    files = [make_wheel(tmp_path, "b", "1.0"), make_wheel(tmp_path, "a", "1.0")]
    one, two = gk.make_tar(tmp_path / "1.tar", files), gk.make_tar(tmp_path / "2.tar", files[::-1])
    assert one.read_bytes() == two.read_bytes()


# --- install.sh on a tiny fake kit -------------------------------------------------------------------------

needs_tools = pytest.mark.skipif(not all(shutil.which(t) for t in ("sh", "sha256sum", "tar", "cat")),
                                 reason="needs sh, sha256sum, tar and cat")


def fake_kit(tmp_path: Path) -> Path:
    """A kit with one archive (a fake wheel) in 3+ parts, a second one-part archive, and a `need` line."""
    kit, src = tmp_path / "kit", tmp_path / "src"
    kit.mkdir()
    src.mkdir()
    w1 = make_wheel(src, "fakepkg", "0.1", files={"fakepkg/__init__.py": "X = 1\n" + "#" * 3000 + "\n"})
    w2 = make_wheel(src, "fakemodel", "0.2")
    archives = {}
    for name, wheel in (("deps", w1), ("model", w2)):
        tar = gk.make_tar(kit / f"{name}.tar", [wheel])
        archives[name] = (tar, gk.split_file(tar, 4096 if name == "deps" else 1 << 20, kit), [wheel.name])
    gk.write_manifest(kit, archives, [("no-such-pkg-xyz", ">=1", "fakepkg"), ("pip", "-", "fakepkg")])
    for tar, _, _ in archives.values():
        tar.unlink()
    shutil.copyfile(ROOT / "tools" / "gpu_kit_install.sh", kit / "install.sh")
    assert len(list(kit.glob("deps.tar.part*"))) >= 3
    return kit


def run_install(kit: Path, target: Path, **env) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", str(kit / "install.sh"), str(target)], capture_output=True, text=True,
                          env={**os.environ, "PYTHON": sys.executable, **env}, timeout=120)


@pytest.mark.slow
@needs_tools
def test_install_sh_missing_part_then_complete(tmp_path):
    kit, target = fake_kit(tmp_path), tmp_path / "site"
    held = kit / "deps.tar.part01"
    held.rename(tmp_path / "held")
    r = run_install(kit, target)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "deps: missing part(s): deps.tar.part01" in r.stdout
    assert "model: installed 1 wheel(s)" in r.stdout
    assert not (target / "fakepkg").exists() and (target / "fakemodel" / "__init__.py").exists()
    assert f"export PYTHONPATH={target}" in r.stdout
    assert "no-such-pkg-xyz (needed by fakepkg) is not installed" in r.stdout
    assert run_install(kit, target, GPU_KIT_REQUIRE_ALL="1").returncode == 3
    (tmp_path / "held").rename(held)  # the part arrives with a later call
    r = run_install(kit, target)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "deps: installed 1 wheel(s)" in r.stdout and "model: already installed" in r.stdout
    assert (target / "fakepkg" / "__init__.py").read_text().startswith("X = 1")
    r = run_install(kit, target)  # idempotent
    assert r.returncode == 0 and "deps: already installed" in r.stdout


@pytest.mark.slow
@needs_tools
def test_install_sh_sha256_mismatch_names_the_bad_part(tmp_path):
    kit, target = fake_kit(tmp_path), tmp_path / "site"
    bad = kit / "deps.tar.part02"
    data = bytearray(bad.read_bytes())
    data[10] ^= 0xFF
    bad.write_bytes(bytes(data))
    r = run_install(kit, target)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "deps: sha256 mismatch" in r.stdout
    assert "bad part deps.tar.part02" in r.stdout and "bad part deps.tar.part00" not in r.stdout
    assert not (target / "fakepkg").exists()
    assert "model: installed 1 wheel(s)" in r.stdout  # the other archive still installs
