"""mmapkit.kmers and mmapkit.RecordWriter: against a naive reference, across modes,
against pykmertools/kmertools, malformed input, crash safety."""

from __future__ import annotations

import gzip
import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mmapkit

COMP = {"A": "T", "C": "G", "G": "C", "T": "A"}


def naive_counts(seq: str, k: int) -> np.ndarray:
    """Canonical k-mer counts the slow obvious way."""
    labels = mmapkit.kmer_labels(k)
    index = {lab: i for i, lab in enumerate(labels)}
    out = np.zeros(len(labels), np.uint32)
    s = seq.upper()
    for i in range(len(s) - k + 1):
        w = s[i : i + k]
        if any(c not in COMP for c in w):
            continue
        rc = "".join(COMP[c] for c in reversed(w))
        out[index[min(w, rc)]] += 1
    return out


def _wrapped(text: str, wrap: int) -> str:
    return "".join(text[j : j + wrap] + "\n" for j in range(0, len(text), wrap))


def write_fasta(path: Path, seqs: list[str], wrap: int = 60) -> Path:
    path.write_text("".join(f">r{i} description\n" + _wrapped(s, wrap) for i, s in enumerate(seqs)))
    return path


def write_fastq(path: Path, seqs: list[str], wrap: int = 60) -> Path:
    quality = ("".join("@" if j % 5 == 0 else "I" for j in range(len(s))) for s in seqs)
    path.write_text(
        "".join(
            f"@r{i}\n" + _wrapped(s, wrap) + "+\n" + _wrapped(q, wrap)
            for i, (s, q) in enumerate(zip(seqs, quality, strict=True))
        )
    )
    return path


def random_seqs(
    n: int, seed: int, alphabet: str = "ACGTACGTACGTacgtN", lo: int = 0, hi: int = 400
) -> list[str]:
    rng = np.random.default_rng(seed)
    letters = np.array(list(alphabet))
    return ["".join(letters[rng.integers(0, len(letters), rng.integers(lo, hi))]) for _ in range(n)]


seq_strategy = st.lists(st.text(alphabet="ACGTacgtNnR", max_size=120), max_size=25)


@settings(max_examples=60, deadline=None)
@given(seqs=seq_strategy, k=st.integers(1, 6), fastq=st.booleans(), wrap=st.integers(1, 80))
def test_counts_and_frequencies_match_naive_reference(tmp_path_factory, seqs, k, fastq, wrap):
    d = tmp_path_factory.mktemp("h")
    path = (write_fastq if fastq else write_fasta)(d / "in", seqs, wrap)
    dims = len(mmapkit.kmer_labels(k))
    want = np.array([naive_counts(s, k) for s in seqs], np.uint32).reshape(len(seqs), dims)
    got = mmapkit.kmers(path, k, counts=True, threads=2)
    assert got.dtype == np.uint32 and got.shape == (len(seqs), dims)
    np.testing.assert_array_equal(got, want)
    freq = mmapkit.kmers(path, k, mode="batch")
    totals = want.sum(axis=1, keepdims=True)
    expect = np.divide(want, totals, out=np.zeros(want.shape), where=totals > 0)
    np.testing.assert_allclose(freq, expect, atol=1e-7)


def test_identical_output_across_modes_and_threads(tmp_path):
    path = write_fasta(tmp_path / "r.fa", random_seqs(700, 1))
    for fmt in ("csv", "tsv", "npy"):
        blobs = {}
        for mode in ("single", "batch", "mmap"):
            for threads in (1, 2, 3):
                out = tmp_path / f"o-{mode}-{threads}.{fmt}"
                assert mmapkit.kmers(path, 4, out, mode=mode, threads=threads) == 700
                blobs[(mode, threads)] = out.read_bytes()
        assert len(set(blobs.values())) == 1, fmt
    arr = np.load(tmp_path / "o-mmap-2.npy")
    np.testing.assert_array_equal(arr, mmapkit.kmers(path, 4))
    csv = np.loadtxt(tmp_path / "o-mmap-2.csv", delimiter=",", dtype=np.float64)
    np.testing.assert_allclose(csv, arr, atol=5e-7)


def test_npy_output_is_an_array_store(tmp_path):
    # The .npy vectors use ArrayStore's growable header: a store opens them
    # as they are (no rewrite) and appends more rows in place.
    path = write_fasta(tmp_path / "r.fa", random_seqs(50, 2))
    out = tmp_path / "v.npy"
    mmapkit.kmers(path, 4, out, mode="mmap", threads=2)
    before = out.read_bytes()
    with mmapkit.ArrayStore.open(out, mode="r+") as store:
        assert store.shape == (50, 136) and store.dtype == np.float32
        assert out.read_bytes()[:128] == before[:128]  # header kept as written
        store.extend(mmapkit.kmers(path, 4)[:5])
    arr = np.load(out)
    assert arr.shape == (55, 136)
    np.testing.assert_array_equal(arr[50:], arr[:5])


def test_gzip_and_plain_agree(tmp_path):
    seqs = random_seqs(300, 2)
    plain = write_fastq(tmp_path / "r.fq", seqs)
    gz = tmp_path / "r.fq.gz"
    gz.write_bytes(gzip.compress(plain.read_bytes()))
    for mode in ("single", "batch", "mmap"):
        np.testing.assert_array_equal(mmapkit.kmers(gz, 5, mode=mode), mmapkit.kmers(plain, 5))


def test_empty_and_short_records(tmp_path):
    path = write_fasta(tmp_path / "e.fa", ["", "AC", "NNNNNN", "ACGT"])
    a = mmapkit.kmers(path, 4)
    assert a.shape == (4, 136)
    assert a[:3].sum() == 0 and a[3].sum() == pytest.approx(1.0)
    empty = tmp_path / "none.fa"
    empty.write_bytes(b"")
    assert mmapkit.kmers(empty, 4).shape == (0, 136)
    assert mmapkit.kmers(empty, 4, tmp_path / "none.npy") == 0
    assert np.load(tmp_path / "none.npy").shape == (0, 136)


@pytest.mark.parametrize(
    ("content", "record", "detail"),
    [
        (b">a\nACGT\n@b\n", None, None),  # '@' inside FASTA is just a bad base: fine
        (b"ACGT\n>a\nAC\n", 1, "expected '>' (FASTA) or '@' (FASTQ)"),
        (
            b"@a\nACGT\n+\nIIII\n@b\nACGT\n+\nIIIIII\n",
            2,
            "quality length 6 differs from sequence length 4",
        ),
        (b"@a\nAC\n+\nII\n@b\nACGT\n", 2, "truncated FASTQ record: no '+' line"),
        (b">a\nAC\n>b\nA\xffC\n", 2, "invalid byte 0xff"),
    ],
)
def test_malformed_input_names_file_and_record(tmp_path, content, record, detail):
    path = tmp_path / "bad.fx"
    path.write_bytes(content)
    if record is None:
        assert mmapkit.kmers(path, 2).shape[0] == 1
        return
    for mode in ("single", "batch", "mmap"):
        with pytest.raises(mmapkit.FormatError) as exc:
            mmapkit.kmers(path, 2, mode=mode)
        msg = str(exc.value)
        assert msg.startswith(str(path)) and f"record {record}: {detail}" in msg, msg
        with pytest.raises(mmapkit.FormatError):
            mmapkit.kmers(path, 2, tmp_path / "out.csv", mode=mode)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.fx"]


def test_bad_arguments(tmp_path):
    path = write_fasta(tmp_path / "a.fa", ["ACGT"])
    with pytest.raises(ValueError):
        mmapkit.kmers(path, 0)
    with pytest.raises(ValueError):
        mmapkit.kmers(path, 4, mode="fast")
    with pytest.raises(ValueError):
        mmapkit.kmers(path, 4, tmp_path / "x.csv", format="json")
    with pytest.raises(FileNotFoundError):
        mmapkit.kmers(tmp_path / "missing.fa", 4)


# --------------------------------------------------------------- pykmertools


def test_equal_to_pykmertools():
    """Same dimensions, order and normalisation as pykmertools' OligoComputer
    (canonical k-mers ordered by their 2-bit code, count / counted k-mers).
    One convention difference: pykmertools breaks k-mers at a newline inside
    the string it is given; mmapkit joins the lines of a record (as a file's
    wrapped sequence must be), so sequences are compared without newlines."""
    pk = pytest.importorskip(
        "pykmertools", reason="pykmertools not installed (pip install -e .[bench])"
    )
    seqs = random_seqs(200, 3, alphabet="ACGTACGTACGTacgtNR-", lo=0, hi=500)
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        path = write_fasta(Path(d) / "r.fa", seqs)
        for k in (3, 4, 5, 7):
            oc = pk.OligoComputer(k)
            assert oc.get_header() == mmapkit.kmer_labels(k)
            want = np.array(oc.vectorise_batch(seqs, norm=True), np.float64)
            np.testing.assert_allclose(mmapkit.kmers(path, k), want, atol=1e-6)
            raw = np.array(oc.vectorise_batch(seqs, norm=False), np.float64)
            np.testing.assert_array_equal(mmapkit.kmers(path, k, counts=True), raw)


@pytest.mark.parametrize("fmt", ["csv", "tsv"])
@pytest.mark.parametrize("counts", [False, True])
def test_csv_is_byte_identical_to_kmertools_cli(tmp_path, fmt, counts):
    """kmertools (the CLI shipped in the pykmertools wheel) writes the same bytes:
    6 decimals (or with -c plain counts, `0,3,12`), ',' or tab separated, one line per read."""
    pytest.importorskip("pykmertools", reason="pykmertools not installed (pip install -e .[bench])")
    exe = shutil.which(
        "kmertools", path=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    )
    if exe is None:
        pytest.skip("kmertools CLI not found next to the interpreter")
    path = write_fasta(tmp_path / "r.fa", random_seqs(300, 4, lo=50, hi=3000))
    args = [exe, "comp", "oligo", "-i", str(path), "-o", str(tmp_path / f"kt.{fmt}")]
    args += ["-k", "4", "-p", fmt, "-t", "1"] + (["-c"] if counts else [])
    subprocess.run(args, check=True, capture_output=True)
    for mode in ("single", "batch", "mmap"):
        mmapkit.kmers(path, 4, tmp_path / f"mk.{fmt}", counts=counts, mode=mode, threads=2)
        assert (tmp_path / f"mk.{fmt}").read_bytes() == (tmp_path / f"kt.{fmt}").read_bytes(), mode


# --------------------------------------------------------------- RecordWriter


def test_record_writer_threads_and_npy(tmp_path):
    out = tmp_path / "v.npy"
    rows = np.arange(4000 * 8, dtype=np.float32).reshape(4000, 8)
    w = mmapkit.RecordWriter(out, 32, npy=("<f4", (8,)))

    def work(t: int) -> None:
        for i in range(t, 4000, 4):
            w.write(i, rows[i].tobytes())

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not out.exists()
    assert w.records == 4000
    assert w.finish() == 4000
    np.testing.assert_array_equal(np.load(out), rows)
    with pytest.raises(ValueError):
        w.write(0, rows[0].tobytes())


def test_record_writer_context_manager(tmp_path):
    out = tmp_path / "t.txt"
    with mmapkit.RecordWriter(out, 4, 3, header=b"#h\n") as w:
        w.write_many(0, b"abc\ndef\nghi\n")
    assert out.read_bytes() == b"#h\nabc\ndef\nghi\n"
    out.write_bytes(b"old\n")
    with pytest.raises(RuntimeError), mmapkit.RecordWriter(out, 4) as w:
        w.write(0, b"new\n")
        raise RuntimeError("boom")
    assert out.read_bytes() == b"old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.txt"]
    with (
        pytest.raises(ValueError, match="2 record writes for 3 records"),
        mmapkit.RecordWriter(out, 4, 3) as w,
    ):
        w.write(0, b"abc\n")
        w.write(2, b"abc\n")
    with pytest.raises(ValueError, match="out of range"):
        mmapkit.RecordWriter(tmp_path / "x", 4, 1).write(5, b"abcd")


CRASH = r"""
import os, signal, sys
import mmapkit
w = mmapkit.RecordWriter(sys.argv[1], 6, int(sys.argv[2]) if sys.argv[2] != "-" else None)
for i in range(1000):
    w.write(i, b"%05d\n" % i)
print("written", flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.parametrize("n", ["1000", "-"])
def test_record_writer_killed_before_finish(tmp_path, n):
    out = tmp_path / "out.txt"
    out.write_bytes(b"previous\n")
    r = subprocess.run(
        [sys.executable, "-c", CRASH, str(out), n],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert r.returncode == -signal.SIGKILL and "written" in r.stdout, r.stderr
    assert out.read_bytes() == b"previous\n"
    # only the killed process's temporary file, named as such
    names = sorted(p.name for p in tmp_path.iterdir())
    assert (
        names[1:] == ["out.txt"]
        and names[0].startswith(".out.txt.mmapkit-")
        and names[0].endswith(".tmp")
    )
    out.unlink()
    subprocess.run(
        [sys.executable, "-c", CRASH, str(out), n], capture_output=True, timeout=120, check=False
    )
    assert not out.exists()
