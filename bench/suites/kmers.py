"""Suite `kmers`: DNA reads to canonical 4-mer frequency vectors, the parallel-writing
article's task, with mmapkit's three designs against kmertools/pykmertools and numpy.

Data: seeded FASTA of generated reads, lengths log-uniform in 100–10,000 bp (many short
reads, some long ones), ~0.1 % N; the large size has 1 M reads (--quick: 10 K), the
small one a quarter of that (for "peak RSS independent of the input size").

Tasks (k = 4, 136 dimensions, frequencies):

1. ``csv``  the article's output: one text line of 136 six-decimal values per read.
            Contenders: mmapkit single / batch / mmap (-j1, -j2), kmertools (the seq2vec
            successor's CLI, shipped in the pykmertools wheel, -t1 and -t2). Every output
            must be byte-identical (SHA-1) to mmapkit single's.
2. ``npy``  binary float32 vectors for ML: mmapkit (.npy) in every mode, pykmertools'
            Python API (batches of 10,000 reads, float32 rows appended to a file) and a
            pure-numpy baseline (one read at a time: lookup table, sliding codes, bincount).
            Checked numerically against mmapkit single's: same shape, and a fixed random
            projection of every row equal within 2e-6.

Every contender runs as a subprocess under ``/usr/bin/time`` (wall, user+system CPU ->
CPU %, peak RSS). The mmapkit binary is $MMAPKIT_BIN, default target/release/mmapkit.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..contenders import mmapkit_bin, mmapkit_cli_available
from ..harness import (
    capped,
    file_digest,
    generated_file,
    labelled,
    need_space,
    package_version,
    primed,
    run_command,
    tool_version,
)
from ..suite import Contender, Dataset, Measured, Size, Suite, Task

DATA_SEED = 6
GENERATOR_VERSION = 1
K = 4
DIMS = 136
MIN_LEN, MAX_LEN = 100, 10_000
N_RATE = 0.001
MEAN_LEN = (MAX_LEN - MIN_LEN) / np.log(MAX_LEN / MIN_LEN)  # log-uniform mean, ~2150 bp
TIME = "/usr/bin/time"
SLOW_REPEATS = 1  # pure numpy and pykmertools on the large size (minutes per run)


def kmertools_bin() -> str | None:
    """The ``kmertools`` binary beside this Python or on PATH (None: not installed)."""
    here = Path(sys.executable).parent / "kmertools"
    return str(here) if here.exists() else shutil.which("kmertools")


# --------------------------------------------------------------------------- data


def write_reads(path: Path, n: int, seed: int) -> dict[str, int]:
    """`n` single-line FASTA reads, seeded, written in blocks of 10,000 (numpy)."""
    bases = np.frombuffer(b"ACGT", np.uint8)
    with open(path, "wb") as f:
        for b0 in range(0, n, 10_000):
            rng = np.random.default_rng([seed, b0])
            m = min(10_000, n - b0)
            lens = np.exp(rng.uniform(np.log(MIN_LEN), np.log(MAX_LEN + 1), m)).astype(np.int64)
            seq = bases[rng.integers(0, 4, int(lens.sum()), dtype=np.uint8)]
            seq[rng.random(seq.size) < N_RATE] = ord("N")
            blob = seq.tobytes()
            ends = np.cumsum(lens).tolist()
            starts = [0, *ends[:-1]]
            parts = []
            for i, (s, e) in enumerate(zip(starts, ends, strict=True)):
                parts.append(b">read%d\n" % (b0 + i))
                parts.append(blob[s:e])
                parts.append(b"\n")
            f.write(b"".join(parts))
    return {"reads": n}


def ensure_reads(data_dir: Path, n: int, log: Callable[[str], None]) -> tuple[Path, dict]:
    """Creates (or reuses) ``n`` random reads as FASTA; returns the path and what describes it."""
    path = data_dir / f"kmers-reads-{n}-s{DATA_SEED}.fa"
    want = {"reads": n, "seed": DATA_SEED, "generator": GENERATOR_VERSION}

    def write(tmp: Path) -> dict[str, int]:  # room for the reads, a csv and an npy output
        need_space(data_dir, int(n * (MEAN_LEN + 20) * 2.5), f"{n:,} reads")
        return write_reads(tmp, n, DATA_SEED)

    return path, generated_file(path, want, write, log, f"{n:,} reads, seed {DATA_SEED}")


# --------------------------------------------------------------------------- running

_TIME_MARK = "kmers-bench-time:"


def run_timed(argv: list[str]) -> dict[str, float]:
    """Runs `argv` under /usr/bin/time; returns cpu % and peak RSS (bytes)."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as tf:
        run_command([TIME, "-o", tf.name, "-f", f"{_TIME_MARK} %e %U %S %M", *argv], shown=argv)
        text = Path(tf.name).read_text()
    line = next((ln for ln in text.splitlines() if ln.startswith(_TIME_MARK)), None)
    if line is None:
        raise RuntimeError(f"/usr/bin/time reported nothing for `{shlex.join(argv)}`")
    wall, user, system, maxrss = (float(x) for x in line.split()[1:5])
    return {
        "cpu_pct": round(100 * (user + system) / wall) if wall > 0 else 0.0,
        "peak_rss": maxrss * 1024,
    }


def out_path(data_dir: Path, name: str, ext: str) -> Path:
    """The output path of contender ``name`` with extension ``ext``."""
    d = data_dir / "kmers-out"
    d.mkdir(parents=True, exist_ok=True)
    return d / (name.replace(" ", "_").replace("-", "") + "." + ext)


# The peers, run as `python -c SCRIPT IN OUT`.
PYKMERTOOLS_SCRIPT = r"""
import sys
import numpy as np
import pykmertools as pk

src, dst, k = sys.argv[1], sys.argv[2], int(sys.argv[3])
oc = pk.OligoComputer(k)

def reads(f):
    seq = None
    for line in f:
        if line.startswith(">"):
            if seq is not None:
                yield "".join(seq)
            seq = []
        else:
            seq.append(line.rstrip("\n"))
    if seq is not None:
        yield "".join(seq)

with open(src) as f, open(dst, "wb") as out:
    batch = []
    for s in reads(f):
        batch.append(s)
        if len(batch) == 10_000:
            np.asarray(oc.vectorise_batch(batch, norm=True), np.float32).tofile(out)
            batch = []
    if batch:
        np.asarray(oc.vectorise_batch(batch, norm=True), np.float32).tofile(out)
"""

NUMPY_SCRIPT = r"""
import sys
import numpy as np

src, dst, k = sys.argv[1], sys.argv[2], int(sys.argv[3])
# canonical index of every k-mer code (A=0 C=1 G=2 T=3, first base most significant)
codes = np.arange(4 ** k)
rc = np.zeros_like(codes)
x = codes.copy()
for _ in range(k):
    rc = rc * 4 + (3 - x % 4)
    x //= 4
canon = np.minimum(codes, rc)
uniq, index = np.unique(canon, return_inverse=True)
dims = len(uniq)
lut = np.full(256, 4, np.int64)
for i, c in enumerate(b"ACGT"):
    lut[c] = i
    lut[c + 32] = i
weights = 4 ** np.arange(k - 1, -1, -1)

def vector(seq):
    b = lut[np.frombuffer(seq, np.uint8)]
    n = len(b) - k + 1
    if n <= 0:
        return np.zeros(dims, np.float32)
    bad = np.concatenate(([0], np.cumsum(b == 4)))
    ok = (bad[k:] - bad[:-k]) == 0
    b = np.minimum(b, 3)
    code = np.zeros(n, np.int64)
    for j in range(k):
        code += b[j:j + n] * weights[j]
    c = np.bincount(index[code[ok]], minlength=dims)
    t = c.sum()
    return (c / t).astype(np.float32) if t else np.zeros(dims, np.float32)

def reads(f):
    seq = None
    for line in f:
        if line.startswith(b">"):
            if seq is not None:
                yield b"".join(seq)
            seq = []
        else:
            seq.append(line.rstrip(b"\r\n"))
    if seq is not None:
        yield b"".join(seq)

with open(src, "rb") as f, open(dst, "wb") as out:
    rows = []
    for s in reads(f):
        rows.append(vector(s))
        if len(rows) == 10_000:
            np.vstack(rows).tofile(out)
            rows = []
    if rows:
        np.vstack(rows).tofile(out)
"""


class Approx:
    """A float array's fingerprint compared within a tolerance: shape, and every row
    projected on a fixed random vector (catches any wrong row with high probability)."""

    TOL = 2e-6

    def __init__(self, shape: tuple[int, ...], proj: np.ndarray) -> None:
        self.shape, self.proj = shape, proj

    @classmethod
    def of(cls, a: np.ndarray) -> Approx:
        """The fingerprint of the array ``a``."""
        r = np.random.default_rng(12345).random(a.shape[1] if a.ndim == 2 else 1)
        proj = np.concatenate(
            [a[i : i + 65536].astype(np.float64) @ r for i in range(0, a.shape[0], 65536)]
            or [np.zeros(0)]
        )
        return cls(tuple(a.shape), proj)

    __hash__ = None  # compared with a tolerance: not hashable

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Approx)
            and self.shape == other.shape
            and bool(np.allclose(self.proj, other.proj, rtol=0, atol=self.TOL))
        )

    def __repr__(self) -> str:
        return f"Approx(shape={self.shape}, proj[:3]={self.proj[:3].round(6).tolist()})"


def check_csv(_path: Path, result: Any) -> Any:
    """The digest of a contender's csv output (the file is removed)."""
    out = result
    try:
        return file_digest(out)
    finally:
        out.unlink(missing_ok=True)


def check_npy(_path: Path, result: Any) -> Any:
    """The fingerprint of a contender's array output (the file is removed)."""
    out = result
    try:
        if out.suffix == ".npy":
            a = np.load(out, mmap_mode="r")
        else:
            a = (
                np.memmap(out, np.float32, "r").reshape(-1, DIMS)
                if out.stat().st_size
                else np.zeros((0, DIMS), np.float32)
            )
        fp = Approx.of(np.asarray(a))
        del a
        return fp
    finally:
        out.unlink(missing_ok=True)


# --------------------------------------------------------------------------- suite


class KmersSuite(Suite):
    """The ``kmers`` suite: k-mer vectors through a mapped output against seq2vec-style tools."""

    name = "kmers"
    title = "k-mer vectors: parallel writes through a mapped output"
    description = (
        "The parallel-writing article's task: turn every DNA read of a FASTA file into its "
        "canonical 4-mer frequency vector (136 dimensions), in input order. mmapkit's three "
        "designs (`--mode single`: one thread; `batch`: reader thread + queue of 10,000-read "
        "batches + worker pool; `mmap`: workers read the mapped input and write each block of "
        "lines at its offset in the output) with 1 and 2 threads, against kmertools (the "
        "seq2vec successor's CLI), pykmertools' Python API and a pure-numpy baseline. Every "
        "run's output is verified against mmapkit single's: byte-identical for the text "
        "output, within 2e-6 for float32 output."
    )
    baseline = "mmapkit single"
    reference = "mmapkit single"
    layout = "rows"
    headline = {
        "capability": "k-mer vectors of sequencing reads",
        "label": "FASTA → csv",
        "task": "csv",
        "contender": "mmapkit mmap -j2",
        "peers": ["kmertools -t1", "kmertools -t2"],
        "sizes": ["large"],
    }
    metrics = {
        "peak_rss": {"title": "peak RSS", "unit": "bytes"},
        "cpu_pct": {"title": "CPU %", "unit": ""},
    }

    def __init__(self) -> None:
        self._data_dir: Path | None = None
        self.tasks = (
            Task(
                "csv",
                "reads → CSV lines (k=4, 6 decimals)",
                check=check_csv,
                repeats=capped(3, labelled("large")),
                note="one line of 136 six-decimal values per read, comma separated (the "
                "layout seq2vec and kmertools write); every output's SHA-1 must equal "
                "mmapkit single's (kmertools' included: the files are identical). At "
                "most 3 timed runs per cache state on the large size.",
            ),
            Task(
                "npy",
                "reads → float32 vectors",
                check=check_npy,
                repeats=capped(SLOW_REPEATS, labelled("large"), otherwise=3),
                warmup=primed(labelled("large")),
                note="float32 rows: mmapkit writes a .npy (header + rows), pykmertools and "
                "numpy append raw rows. Checked against mmapkit single's array: same "
                "shape, every row's projection on a fixed random vector within 2e-6. "
                f"On the large size each cell is timed {SLOW_REPEATS} time(s) per cache "
                "state with a plain read of the data as the warm-up (the numpy baseline "
                "takes minutes per run), on the small size at most 3 times.",
            ),
        )
        self.contenders = self._contenders()

    # ----------------------------------------------------------------- data

    def sizes(self, quick: bool) -> list[Size]:
        # KMERS_BENCH_READS overrides the large size's read count (the smoke test's tiny run)
        large = int(os.environ.get("KMERS_BENCH_READS") or (10_000 if quick else 1_000_000))
        return [Size("small", int(large // 4 * MEAN_LEN)), Size("large", int(large * MEAN_LEN))]

    def prepare(self, size: Size, data_dir: Path, log: Callable[[str], None]) -> Dataset:
        self._data_dir = data_dir
        n = round(size.nbytes / MEAN_LEN)
        path, info = ensure_reads(data_dir, n, log)
        return Dataset(
            size,
            path,
            [path],
            {
                "reads": info["reads"],
                "bytes": info["bytes"],
                "seed": DATA_SEED,
                "generator": "bench/suites/kmers.py",
            },
        )

    # ----------------------------------------------------------------- contenders

    def _out(self, name: str, ext: str) -> Path:
        assert self._data_dir is not None, "prepare() runs first"
        return out_path(self._data_dir, name, ext)

    def _contenders(self) -> tuple[Contender, ...]:
        def mk(mode: str, threads: int | None) -> Callable[[], dict[str, Callable[[Path], Any]]]:
            name = f"mmapkit {mode}" + (f" -j{threads}" if threads else "")

            def run(p: Path, ext: str) -> Measured:
                out = self._out(name, ext)
                argv = [
                    str(mmapkit_bin()),
                    "kmers",
                    "-k",
                    str(K),
                    "--mode",
                    mode,
                    *(["-j", str(threads)] if threads else []),
                    str(p),
                    "-o",
                    str(out),
                ]
                return Measured(out, run_timed(argv))

            return lambda: {"csv": lambda p: run(p, "csv"), "npy": lambda p: run(p, "npy")}

        def kt_available() -> str | None:
            return None if kmertools_bin() else "kmertools not installed (pip install -e .[bench])"

        def kt(threads: int) -> Callable[[], dict[str, Callable[[Path], Any]]]:
            def run(p: Path) -> Measured:
                out = self._out(f"kmertools t{threads}", "csv")
                argv = [
                    kmertools_bin() or "kmertools",
                    "comp",
                    "oligo",
                    "-i",
                    str(p),
                    "-o",
                    str(out),
                    "-k",
                    str(K),
                    "-p",
                    "csv",
                    "-t",
                    str(threads),
                ]
                return Measured(out, run_timed(argv))

            return lambda: {"csv": run}

        def pk_available() -> str | None:
            try:
                import pykmertools  # noqa: F401
            except ImportError:
                return "pykmertools not installed (pip install -e .[bench])"
            return None

        def script(name: str, source: str) -> Callable[[], dict[str, Callable[[Path], Any]]]:
            def run(p: Path) -> Measured:
                out = self._out(name, "f32")
                return Measured(
                    out, run_timed([sys.executable, "-c", source, str(p), str(out), str(K)])
                )

            return lambda: {"npy": run}

        F = "reads.fa"
        variants = []
        for mode, threads in (
            ("single", None),
            ("batch", 1),
            ("batch", 2),
            ("mmap", 1),
            ("mmap", 2),
        ):
            name = f"mmapkit {mode}" + (f" -j{threads}" if threads else "")
            j = f" -j {threads}" if threads else ""
            variants.append(
                Contender(
                    name,
                    mk(mode, threads),
                    available=mmapkit_cli_available,
                    commands={
                        "csv": f"mmapkit kmers --mode {mode}{j} {F} -o v.csv",
                        "npy": f"mmapkit kmers --mode {mode}{j} {F} -o v.npy",
                    },
                    note={
                        "single": "one thread: buffered reads, vectorise, buffered append "
                        "(`-j` does not apply).",
                        "batch": f"reader thread + queue of 10,000-read batches + {threads} "
                        "worker thread(s); batches appended in order.",
                        "mmap": f"{threads} worker thread(s) take the next reads from the mapped "
                        "input and write each block of records at its offset in the output "
                        "(one `pwrite` per block into the temporary file, grown in place; no "
                        "pre-pass).",
                    }[mode],
                )
            )
        return (
            *variants,
            Contender(
                "kmertools -t1",
                kt(1),
                available=kt_available,
                commands={"csv": f"kmertools comp oligo -i {F} -o v.csv -k 4 -p csv -t 1"},
                note="kmertools 1.0 CLI (the seq2vec successor, from the pykmertools "
                "wheel; Rust, memory-mapped output), one thread.",
            ),
            Contender(
                "kmertools -t2",
                kt(2),
                available=kt_available,
                commands={"csv": f"kmertools comp oligo -i {F} -o v.csv -k 4 -p csv -t 2"},
                note="the same with two threads.",
            ),
            Contender(
                "pykmertools",
                script("pykmertools", PYKMERTOOLS_SCRIPT),
                available=pk_available,
                commands={
                    "npy": "python: OligoComputer(4).vectorise_batch(10,000 reads) "
                    "→ float32 rows appended to a file"
                },
                note="pykmertools' Python API as a Python user would call it: a FASTA "
                "line reader, `vectorise_batch` per 10,000 reads (multi-threaded "
                "inside), `np.asarray(..., float32).tofile(out)`.",
            ),
            Contender(
                "numpy",
                script("numpy", NUMPY_SCRIPT),
                commands={
                    "npy": "python: per read lut[frombuffer] → sliding codes → "
                    "bincount → float32 rows"
                },
                note="pure-numpy baseline, one thread: per read a lookup table, the "
                "k-mer codes of all windows at once, windows with N masked out "
                "(cumsum), canonical index table, `np.bincount`, divide.",
            ),
        )

    # ----------------------------------------------------------------- report

    def versions(self) -> dict[str, str]:
        return {
            "mmapkit CLI": f"{tool_version([str(mmapkit_bin()), '--version'])} ({mmapkit_bin()})",
            "pykmertools / kmertools": package_version("pykmertools"),
            "kmertools CLI": tool_version([kmertools_bin() or "kmertools", "--version"]),
        }

    def targets(self, doc: dict[str, Any]) -> list[dict[str, Any]]:
        if not any(s["label"] == "large" for s in doc["sizes"]):
            return []

        def goal(
            label: str,
            task: str,
            contender: str,
            versus: str,
            speedup: float,
            size: str = "large",
            **extra: Any,
        ) -> dict[str, Any]:
            return {
                "label": label,
                "task": task,
                "contender": contender,
                "versus": versus,
                "min_speedup": speedup,
                "size": size,
                "cache": "warm",
                **extra,
            }

        out = [
            goal(
                "mmap mode ≥ 1.8× single mode on 2 cores",
                "csv",
                "mmapkit mmap -j2",
                "mmapkit single",
                1.8,
            ),
            goal(
                "mmap mode ≥ 1.5× pykmertools throughput",
                "npy",
                "mmapkit mmap -j2",
                "pykmertools",
                1.5,
            ),
        ]
        # "peak RSS independent of the input size": the same bound at both sizes
        for size in ("small", "large"):
            if any(s["label"] == size for s in doc["sizes"]):
                out.append(
                    goal(
                        f"mmap mode peak RSS bounded ({size})",
                        "csv",
                        "mmapkit mmap -j2",
                        "mmapkit mmap -j2",
                        1.0,
                        size=size,
                        max_metric={"peak_rss": 64 << 20},
                    )
                )
        return out

    notes = (
        "Reads: generated with numpy from a fixed seed (`bench/suites/kmers.py`), one line "
        "each, lengths log-uniform in 100–10,000 bp (mean ~2,150 bp; many short reads and "
        "some long ones), uniform bases with ~0.1 % N; the small size has a quarter of the "
        "large size's reads. The GB/s columns are FASTA bytes per second.",
        "Each contender is a subprocess started under `/usr/bin/time` (started from Python, "
        "~1 ms); CPU % = (user + system) / wall, peak RSS = the child's `ru_maxrss` (for "
        "the Python contenders it includes the interpreter and numpy, ~30 MB). Outputs go to "
        "bench/data/kmers-out/ and are deleted after being verified (untimed).",
        "Peak RSS counts the pages of mapped files a process has touched: mmapkit's mmap mode "
        "releases the pages of finished input and output (`MADV_DONTNEED` behind the lowest "
        "unfinished block; they stay in the page cache), so its RSS does not grow with the "
        "data; kmertools keeps its whole mapped output resident.",
        "The mmap-mode RSS targets compare the mode with itself (speed-up 1.0) and check the "
        "same 64 MiB bound at both sizes.",
        "Run time on an idle 2-core VM (estimate): full (250 K and 1 M reads, 0.54 and 2.15 GB "
        "of FASTA) ~30–40 min, most of it in the numpy baseline and kmertools; `--quick` "
        "(2.5 K and 10 K reads, warm cache only) under a minute.",
    )
