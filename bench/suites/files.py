"""Suite `files`: mmapkit's whole-file command-line tools against the classic ones.

On a seeded CSV of numbers (100 columns, like the article "Memory-Mapped I/O vs
Standard File I/O"), every task is done by the classic Unix tool (the task's
baseline), its modern peer (ripgrep, sd) and the `mmapkit` CLI, all in one run:

1. ``count_lines``    wc -l, grep -c '', rg -c '', a naive byte loop (Rust, the
                      article's style), Python ``for line in f``, and mmapkit count
                      --lines with each strategy (auto, mmap, read), 1 and all threads
2. ``count_absent``   a string that never occurs: grep -c -F, rg -c -F, mmapkit count
3. ``find_first``     first offset of a string near the start: grep/rg -m1 -b -o -F,
                      mmapkit find
4. ``regex_literal``  matching lines of a literal-prefixed regex: grep -c -E, rg -c,
                      mmapkit grep -c
5. ``regex_class``    the same for a regex that starts with a character class
6. ``replace_same``   "," -> ";" in place: sed -i, sd -F, tr (to a new file),
                      mmapkit replace -F (with and without --sync)
7. ``replace_grow``   "," -> ", ": sed -i, sd -F, mmapkit replace -F; peak RSS
8. ``keep_first``     keep the first line: sed -i 1q, the article's read-everything-
                      then-rewrite (Rust), mmapkit keep-lines 1
9. ``bandwidth``      the machine's limit in the same run: every core summing its share
                      of the mapped file (Rust); the report shows each row's GB/s as a
                      share of it

Every command runs as a subprocess (stdout captured, peak RSS from wait4), with
LC_ALL=C. Counts are parsed from each tool's output and must agree; modified files
must be byte-identical (SHA-1) across contenders. The mmapkit binary is
$MMAPKIT_BIN, default target/release/mmapkit (``make cli``); ripgrep and sd come
from .venv/tools/bin (``make bench-tools``) or PATH.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..harness import (REPO_DIR, Contender, Dataset, Measured, Size, Suite, Task, Unavailable,
                       file_digest, human_bytes)

# --------------------------------------------------------------------------- constants

DATA_SEED = 20
GENERATOR_VERSION = 1
COLUMNS = 100
SPLIT_AT = 50  # lines past the pool are half a pool line + the other half of another
POOL_LINES = 1 << 16

ABSENT = "31415926535"  # 11 digits: the data never has more than 6 digits in a row
REGEX_LITERAL = r"7[0-9]{3}\.5"  # literal prefix "7"
REGEX_CLASS = r"[0-9]{4},[0-9]{4}\.[0-9]5"  # starts with a class: no literal prefix
FIND_LINE, FIND_FIELD = 9, 40  # "find first": fields 40..42 of line 10, with their commas

LARGE = 64 << 20  # sizes above this get fewer repeats for the slow tasks
TOOLS_DIR = REPO_DIR / ".venv" / "tools" / "bin"
DEFAULT_MMAPKIT = REPO_DIR / "target" / "release" / "mmapkit"


def mmapkit_bin() -> Path:
    return Path(os.environ.get("MMAPKIT_BIN") or DEFAULT_MMAPKIT)


# --------------------------------------------------------------------------- data

_PAD = 0
_W = 11  # bytes per field slot: sign, 6 integer digits, '.', 2 decimals, separator
_POW = 10 ** np.arange(5, -1, -1, dtype=np.int64)


def _column_formats(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per column: decimal (True) or integer, number of integer digits, may be negative."""
    rng = np.random.default_rng([seed, 0xC5F])
    decimal = rng.random(COLUMNS) < 0.6
    digits = np.where(decimal, rng.integers(1, 5, COLUMNS), rng.integers(1, 7, COLUMNS))
    negative = rng.random(COLUMNS) < 0.15
    return decimal, digits, negative


def _rows(rng: np.random.Generator, n: int, cols: slice, formats: tuple, last: bool) -> list[bytes]:
    """`n` CSV row pieces for the columns `cols`, each ending with ',' (or '\\n' if
    `last`): numbers with a column-specific number of integer digits (no leading
    zeros), two decimals in decimal columns, a '-' on half the values of negative
    columns. Vectorised: fixed-width slots padded with NUL, then compacted."""
    decimal, digits, negative = (a[cols] for a in formats)
    k = len(decimal)
    value = (rng.random((n, k)) * (10 ** digits)).astype(np.int64)
    dec = rng.integers(0, 100, (n, k), dtype=np.int64)
    sign = negative & (rng.random((n, k)) < 0.5)
    a = np.zeros((n, k, _W), np.uint8)
    a[:, :, 0] = np.where(sign, ord("-"), _PAD)
    lead = (value[:, :, None] < _POW) & (_POW > 1)
    a[:, :, 1:7] = np.where(lead, _PAD, (value[:, :, None] // _POW) % 10 + 48)
    a[:, :, 7] = np.where(decimal, ord("."), _PAD)
    a[:, :, 8] = np.where(decimal, dec // 10 + 48, _PAD)
    a[:, :, 9] = np.where(decimal, dec % 10 + 48, _PAD)
    a[:, :, 10] = ord(",")
    if last:
        a[:, -1, 10] = ord("\n")
    flat = a.reshape(n, k * _W)
    ends = np.cumsum(np.count_nonzero(flat, axis=1))
    blob = flat[flat != _PAD].tobytes()
    starts = np.concatenate(([0], ends[:-1]))
    return [blob[s:e] for s, e in zip(starts.tolist(), ends.tolist())]


def _write_csv(path: Path, seed: int, nbytes: int) -> dict[str, int]:
    """Writes the CSV (at most `nbytes`, whole lines); returns its byte and line counts.

    A pool of 65,536 lines is generated with numpy and written first, in order;
    every further line joins the first 50 fields of one pool line with the last 50
    of another (both picked by a seeded RNG per 16,384-line block), so lines do not
    repeat in practice, and it runs at disk speed. Every size is a prefix of the
    larger ones.
    """
    formats = _column_formats(seed)
    left: list[bytes] = []
    right: list[bytes] = []
    step = 8192
    for b in range(0, POOL_LINES, step):
        rng = np.random.default_rng([seed, 1, b])
        left += _rows(rng, step, slice(0, SPLIT_AT), formats, last=False)
        right += _rows(rng, step, slice(SPLIT_AT, COLUMNS), formats, last=True)
    tmp = path.with_name(path.name + ".partial")
    written = lines = 0
    with open(tmp, "wb") as f:
        block_no = 0
        while written < nbytes:
            if block_no == 0:
                pieces = [x for pair in zip(left, right) for x in pair]
            else:
                rng = np.random.default_rng([seed, 2, block_no])
                n = 16384
                li = rng.integers(0, POOL_LINES, n).tolist()
                ri = rng.integers(0, POOL_LINES, n).tolist()
                pieces = [None] * (2 * n)  # type: ignore[list-item]
                pieces[0::2] = [left[i] for i in li]
                pieces[1::2] = [right[i] for i in ri]
            block = b"".join(pieces)  # type: ignore[arg-type]
            room = nbytes - written
            if len(block) > room:
                cut = block.rfind(b"\n", 0, room) + 1
                block = block[:cut]
                if not block:
                    break
                room = -1  # last block
            f.write(block)
            written += len(block)
            lines += block.count(b"\n")
            block_no += 1
            if room < 0:
                break
    os.replace(tmp, path)
    return {"bytes": written, "lines": lines}


def _check_space(data_dir: Path, nbytes: int, existing: int) -> None:
    """The large tasks need the data, a working copy and a rewritten copy (~3x)."""
    need = 3 * nbytes - existing
    free = shutil.disk_usage(data_dir).free
    if free < need:
        raise RuntimeError(
            f"not enough free disk space in {data_dir} for the {human_bytes(nbytes)} "
            f"`files` data: {free / 2**30:.1f} GiB free, need {need / 2**30:.1f} GiB "
            f"(3x the size: the data file, a working copy and a rewritten copy). Free "
            f"some space, or run a smaller size (--quick, or --sizes small).")


def ensure_csv(data_dir: Path, nbytes: int, log: Callable[[str], None]) -> tuple[Path, dict]:
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / f"files-csv-{nbytes}-s{DATA_SEED}.csv"
    marker = path.with_name(path.name + ".ok")
    want = {"nbytes": nbytes, "seed": DATA_SEED, "generator": GENERATOR_VERSION}
    try:
        info = json.loads(marker.read_text())
        if {k: info.get(k) for k in want} == want and path.stat().st_size == info["bytes"]:
            _check_space(data_dir, nbytes, info["bytes"])
            return path, info
    except (OSError, ValueError, KeyError):
        pass
    _check_space(data_dir, nbytes, 0)
    log(f"generating {path.name} (~{nbytes:,} bytes, seed {DATA_SEED}) ...")
    marker.unlink(missing_ok=True)
    info = {**want, **_write_csv(path, DATA_SEED, nbytes)}
    marker.write_text(json.dumps(info) + "\n")
    return path, info


# --------------------------------------------------------------------------- running tools

_ENV = {**os.environ, "LC_ALL": "C",
        "PATH": os.pathsep.join([str(TOOLS_DIR), os.environ.get("PATH", "")])}
_ENV.pop("LANGUAGE", None)
_STDERR: Any = None


def _stderr_file() -> Any:
    global _STDERR
    if _STDERR is None:
        _STDERR = tempfile.TemporaryFile()
    _STDERR.seek(0)
    _STDERR.truncate()
    return _STDERR


_RSS_MARK = b"\nfiles-helper-maxrss-kib: "


def run(argv: list[str], *, stdin: Path | None = None, stdout: Path | None = None,
        ok: tuple[int, ...] = (0,), rss: bool = False) -> tuple[bytes, int, int | None]:
    """Runs a command; returns (stdout, exit status, peak RSS in bytes or None).

    stdout is captured (or written to the file `stdout`), stderr kept for the error
    message. With `rss`, the command runs under the compiled helper's `rss` wrapper,
    which reports the command's own peak RSS (see HELPER_SOURCE; ~0.5 ms more).
    """
    shown = argv
    wrapper = _rss_wrapper() if rss else None
    if wrapper:
        argv = [wrapper, "rss", *argv]
    err = _stderr_file()
    fin = open(stdin, "rb") if stdin else None
    fout = open(stdout, "wb") if stdout else None
    try:
        p = subprocess.Popen(argv, stdin=fin or subprocess.DEVNULL,
                             stdout=fout or subprocess.PIPE, stderr=err, env=_ENV)
        out = b""
        if p.stdout is not None:
            out = p.stdout.read()
            p.stdout.close()
        rc = p.wait()
    finally:
        if fin:
            fin.close()
        if fout:
            fout.close()
    peak = None
    if wrapper or rc not in ok:
        err.seek(0)
        text = err.read()
        if wrapper:
            text, mark, kib = text.rpartition(_RSS_MARK)
            if mark:
                peak = int(kib) * 1024  # ru_maxrss is in KiB on Linux
        if rc not in ok:
            msg = text.decode(errors="replace").strip()
            raise RuntimeError(f"`{shlex.join(shown)}` exited with status {rc}"
                               + (f": {msg[-400:]}" if msg else ""))
        if wrapper and peak is None:
            raise RuntimeError(f"`{shlex.join(shown)}`: the rss wrapper reported nothing")
    return out, rc, peak


def _first_int(out: bytes, cmd: str) -> int:
    m = re.match(rb"\s*(\d+)", out)
    if not m:
        raise RuntimeError(f"`{cmd}` printed {out[:80]!r}, not a number")
    return int(m.group(1))


def _count(argv: list[str], strict: bool = False) -> int:
    """A command that prints a count (nothing = 0, as rg -c does); exit 0 or 1.
    `strict` (mmapkit): exit status 1 if and only if the count is 0."""
    out, rc, _ = run(argv, ok=(0, 1))
    n = 0 if not out.strip() else _first_int(out, shlex.join(argv))
    if strict and (rc == 1) != (n == 0):
        raise RuntimeError(f"`{shlex.join(argv)}` printed {n} but exited with status {rc} "
                           "(the contract: 1 if and only if nothing matched)")
    return n


def _offset(argv: list[str]) -> int:
    """A command that prints the first match's offset ("OFFSET" or "OFFSET:match")."""
    out, _rc, _ = run(argv)
    return _first_int(out.split(b":", 1)[0], shlex.join(argv))


def _modify(argv: list[str], *, stdin: Path | None = None, stdout: Path | None = None,
            result: Path | None = None, expect: int | None = None) -> Measured:
    """A command that rewrites a file; returns the file to hash. `expect`: the number
    of replacements the command must print (mmapkit)."""
    out, _rc, rss = run(argv, stdin=stdin, stdout=stdout, rss=True)
    if expect is not None:
        n = _first_int(out, shlex.join(argv))
        if n != expect:
            raise RuntimeError(f"`{shlex.join(argv)}` reported {n} replacements, the file "
                               f"has {expect}")
    return Measured(result or Path(argv[-1]), {"peak_rss": rss} if rss is not None else {})


def _tool(name: str) -> str | None:
    """Absolute path of a tool: .venv/tools/bin first, then PATH."""
    local = TOOLS_DIR / name
    if local.is_file() and os.access(local, os.X_OK):
        return str(local)
    return shutil.which(name)


def _need_tool(name: str) -> str:
    """_tool(), for the contenders' factories (called only when available)."""
    path = _tool(name)
    if path is None:
        raise Unavailable(f"{name} not found")
    return path


def _version(argv: list[str]) -> str:
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=20, env=_ENV)
        lines = (p.stdout or p.stderr).strip().splitlines()
        return lines[0] if lines and p.returncode == 0 else "?"
    except (OSError, subprocess.SubprocessError):
        return "not found"


# --------------------------------------------------------------------------- compiled helpers

HELPER_SOURCE = r'''
// Helpers of the `files` benchmark (bench/suites/files.py), compiled with rustc -O.
//   count-lines FILE     the article's style: File + read() into a 64 KiB buffer,
//                        a plain loop over the bytes counting b'\n'
//   keep-first FILE      the article's std-I/O truncation: read the whole file,
//                        find the first newline, copy the first line, reopen the
//                        file for writing (truncating it) and write the line back
//   scan-mmap FILE THREADS  bandwidth reference: every thread maps its share of the
//                        file (MAP_POPULATE: no page faults) and sums it as u64 words
//   scan-read FILE THREADS  the same with pread into a 256 KiB buffer per thread
//                        (both print the wrapping sum of the file's u64 words plus
//                        its trailing bytes, so they check each other)
//   rss CMD ARGS...      runs CMD (stdio inherited), then appends its peak RSS as
//                        "\nfiles-helper-maxrss-kib: N" to stderr and exits with its
//                        status. A child's ru_maxrss includes the memory of the
//                        process that spawned it (the mm it had before exec), so a
//                        child of the Python harness would report >= Python's peak;
//                        a child of this small program reports its own.
use std::fs::File;
use std::io::{Read, Write};
use std::os::raw::{c_int, c_void};
use std::os::unix::io::AsRawFd;

extern "C" {
    fn mmap(addr: *mut c_void, len: usize, prot: c_int, flags: c_int, fd: c_int, off: i64) -> *mut c_void;
    fn munmap(addr: *mut c_void, len: usize) -> c_int;
    // struct rusage: two struct timeval (2 x i64 each), then ru_maxrss and 13 more longs
    fn wait4(pid: c_int, status: *mut c_int, options: c_int, rusage: *mut [i64; 18]) -> c_int;
}

fn rss(cmd: &[String]) -> ! {
    let child = match std::process::Command::new(&cmd[0]).args(&cmd[1..]).spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("files-helper: {}: {e}", cmd[0]);
            std::process::exit(127);
        }
    };
    let (mut status, mut usage) = (0 as c_int, [0i64; 18]);
    if unsafe { wait4(child.id() as c_int, &mut status, 0, &mut usage) } < 0 {
        eprintln!("files-helper: wait4: {}", std::io::Error::last_os_error());
        std::process::exit(126);
    }
    std::mem::forget(child); // reaped above
    eprintln!("\nfiles-helper-maxrss-kib: {}", usage[4]);
    let code = if status & 0x7f == 0 { (status >> 8) & 0xff } else { 128 + (status & 0x7f) };
    std::process::exit(code)
}

fn count_lines(path: &str) -> std::io::Result<u64> {
    let mut f = File::open(path)?;
    let mut buf = vec![0u8; 64 * 1024];
    let mut count = 0u64;
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            return Ok(count);
        }
        for &b in &buf[..n] {
            if b == b'\n' {
                count += 1;
            }
        }
    }
}

fn keep_first(path: &str) -> std::io::Result<u64> {
    let mut contents = Vec::new();
    File::open(path)?.read_to_end(&mut contents)?;
    let ix = contents.iter().position(|&x| x == b'\n').unwrap_or(contents.len().saturating_sub(1));
    let truncated = contents[..=ix.min(contents.len().saturating_sub(1))].to_vec();
    drop(contents);
    let mut f = File::create(path)?;
    f.write_all(&truncated)?;
    Ok(truncated.len() as u64)
}

fn sum_bytes(b: &[u8]) -> u64 {
    // whole u64 words (native endianness), then any trailing bytes one by one
    let words = b.len() / 8;
    let w: &[u64] = unsafe { std::slice::from_raw_parts(b.as_ptr() as *const u64, words) };
    let mut sum = if b.as_ptr() as usize % 8 == 0 {
        w.iter().fold(0u64, |a, &x| a.wrapping_add(x))
    } else {
        b[..words * 8].chunks_exact(8)
            .fold(0u64, |a, c| a.wrapping_add(u64::from_ne_bytes(c.try_into().unwrap())))
    };
    for &x in &b[words * 8..] {
        sum = sum.wrapping_add(x as u64);
    }
    sum
}

fn chunks(len: u64, threads: usize) -> Vec<(u64, u64)> {
    let page = 1u64 << 16; // chunk starts: multiples of 64 KiB (page- and word-aligned)
    let per = ((len + threads as u64 - 1) / threads.max(1) as u64 + page - 1) / page * page;
    let mut v = Vec::new();
    let mut off = 0;
    while off < len {
        v.push((off, per.min(len - off)));
        off += per;
    }
    v
}

fn scan(path: &str, threads: usize, mapped: bool) -> std::io::Result<u64> {
    use std::os::unix::fs::FileExt;
    let f = File::open(path)?;
    let len = f.metadata()?.len();
    let f = &f;
    std::thread::scope(|s| {
        let hs: Vec<_> = chunks(len, threads)
            .into_iter()
            .map(|(off, n)| {
                s.spawn(move || -> std::io::Result<u64> {
                    if mapped {
                        const MAP_SHARED: c_int = 1;
                        const MAP_POPULATE: c_int = 0x8000;
                        let p = unsafe {
                            mmap(std::ptr::null_mut(), n as usize, 1, MAP_SHARED | MAP_POPULATE,
                                 f.as_raw_fd(), off as i64)
                        };
                        if p as isize == -1 {
                            return Err(std::io::Error::last_os_error());
                        }
                        let b = unsafe { std::slice::from_raw_parts(p as *const u8, n as usize) };
                        let sum = sum_bytes(b);
                        unsafe { munmap(p, n as usize) };
                        Ok(sum)
                    } else {
                        let mut buf = vec![0u64; 32 * 1024]; // 256 KiB, u64-aligned
                        let buf: &mut [u8] = unsafe {
                            std::slice::from_raw_parts_mut(buf.as_mut_ptr() as *mut u8, buf.len() * 8)
                        };
                        let (mut sum, mut pos, end) = (0u64, off, off + n);
                        while pos < end {
                            let want = buf.len().min((end - pos) as usize);
                            f.read_exact_at(&mut buf[..want], pos)?;
                            sum = sum.wrapping_add(sum_bytes(&buf[..want]));
                            pos += want as u64;
                        }
                        Ok(sum)
                    }
                })
            })
            .collect();
        hs.into_iter().try_fold(0u64, |a, h| Ok(a.wrapping_add(h.join().unwrap()?)))
    })
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(|s| s.as_str()) == Some("rss") && args.len() > 2 {
        rss(&args[2..]);
    }
    let r = match (args.get(1).map(|s| s.as_str()), args.get(2)) {
        (Some("count-lines"), Some(p)) => count_lines(p),
        (Some("keep-first"), Some(p)) => keep_first(p),
        (Some(m @ ("scan-mmap" | "scan-read")), Some(p)) => {
            scan(p, args.get(3).and_then(|t| t.parse().ok()).unwrap_or(1), m == "scan-mmap")
        }
        _ => {
            eprintln!("usage: files-helper count-lines|keep-first|scan-mmap|scan-read FILE [THREADS]");
            std::process::exit(2);
        }
    };
    match r {
        Ok(n) => println!("{n}"),
        Err(e) => {
            eprintln!("files-helper: {}: {e}", args[2]);
            std::process::exit(2);
        }
    }
}
'''

_helper_path: Path | None = None


def _rss_wrapper() -> str | None:
    """The helper's path for `rss` runs, or None (no rustc: peak RSS not measured)."""
    try:
        return str(helper())
    except Unavailable:
        return None


def helper() -> Path:
    """The compiled helper, built once into bench/data/tools/ (keyed by its source)."""
    global _helper_path
    if _helper_path is not None:
        return _helper_path
    rustc = shutil.which("rustc") or shutil.which("rustc", path=str(Path.home() / ".cargo" / "bin"))
    if not rustc:
        raise Unavailable("rustc not found (needed to compile the helper programs)")
    tools = REPO_DIR / "bench" / "data" / "tools"
    tools.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha1(HELPER_SOURCE.encode()).hexdigest()[:12]
    exe = tools / f"files-helper-{digest}"
    if not exe.exists():
        src = tools / f"files-helper-{digest}.rs"
        src.write_text(HELPER_SOURCE)
        p = subprocess.run([rustc, "-O", "--edition", "2021", "-o", str(exe) + ".tmp", str(src)],
                           capture_output=True, text=True)
        if p.returncode != 0:
            raise Unavailable(f"compiling the helper failed: {p.stderr.strip()[-300:]}")
        os.replace(str(exe) + ".tmp", exe)
    _helper_path = exe
    return exe


def _threads() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


# --------------------------------------------------------------------------- contenders


def _mmapkit_available() -> str | None:
    exe = mmapkit_bin()
    if not exe.is_file():
        return (f"{exe} not built (make cli)" if exe == DEFAULT_MMAPKIT
                else f"MMAPKIT_BIN={exe} does not exist")
    try:
        p = subprocess.run([str(exe), "count", "--lines", str(REPO_DIR / "Cargo.toml")],
                           capture_output=True, text=True, timeout=30, env=_ENV)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{exe} does not run ({exc})"
    if p.returncode != 0 or not p.stdout.strip().isdigit():
        msg = " ".join((p.stderr or p.stdout).split())[:120]
        return f"this mmapkit has no `count --lines` (exit {p.returncode}: {msg})"
    return None


def _tool_available(name: str, hint: str) -> Callable[[], str | None]:
    def check() -> str | None:
        return None if _tool(name) else f"{name} not installed ({hint})"
    return check


_BENCH_TOOLS = "make bench-tools installs it into .venv/tools"


class FilesSuite(Suite):
    name = "files"
    title = "mmapkit's whole-file tools vs wc, grep, ripgrep, sed, sd"
    description = (
        "The whole-file command-line tools of mmapkit (`mmapkit count`, `find`, `grep -c`, "
        "`replace`, `keep-lines`) against the classic Unix tools (`wc`, `grep`, `sed`), "
        "their modern peers (`rg`, `sd`) and the article *Memory-Mapped I/O vs Standard "
        "File I/O*'s approaches, on a seeded CSV of 100 numeric columns at ~200 kB (the "
        "article's small file) and at a large size, with a warm and a cold page cache. "
        "Every tool runs as a subprocess with its output captured; counts must agree and "
        "rewritten files must be byte-identical, on every run. Each task's classic tool is "
        "its baseline (◆); a bandwidth reference measured in the same run shows how close "
        "each tool gets to the machine's limit."
    )
    baseline = "wc"
    layout = "rows"
    metrics = {"peak_rss": {"title": "peak RSS", "unit": "bytes"}}
    limit = ("bandwidth", None)  # the fastest contender of the task
    headline = {"capability": "command-line tools on big files", "label": "count lines",
                "task": "count_lines", "contender": "mmapkit", "peers": ["wc", "grep", "rg"],
                "sizes": ["large"]}

    def __init__(self) -> None:
        self._info: dict[str, dict[str, Any]] = {}
        self.tasks = self._tasks()
        self.contenders = self._contenders()

    # ----------------------------------------------------------------- sizes and data

    def sizes(self, quick: bool) -> list[Size]:
        # --quick (make run) keeps every contender but with a 16 MiB "large" file
        return [Size("small", 200_000), Size("large", (16 << 20) if quick else (4 << 30))]

    def prepare(self, size: Size, data_dir: Path, log: Callable[[str], None]) -> Dataset:
        _rss_wrapper()  # compile the helper now, not in a timed run
        path, info = ensure_csv(data_dir, size.nbytes, log)
        with open(path, "rb") as f:
            head = f.read(1 << 16)
        lines = head.split(b"\n")
        fields = lines[FIND_LINE].split(b",")
        needle = b"," + b",".join(fields[FIND_FIELD:FIND_FIELD + 3]) + b","
        first = head.find(needle)
        if not 0 <= first < len(head):
            raise RuntimeError(f"{path}: no {needle!r} in the first 64 KiB")
        info = {**info, "find_needle": needle.decode(), "find_expected": first,
                "commas": info["lines"] * (COLUMNS - 1), "generator": "bench/suites/files.py"}
        self._info[size.label] = info
        log(f"  {path.name}: {info['bytes']:,} bytes, {info['lines']:,} lines")
        return Dataset(size, path, [path], info)

    # ----------------------------------------------------------------- working copies

    @staticmethod
    def _work(ds: Dataset) -> Path:
        return ds.path.with_name(ds.path.stem + ".work.csv")

    @staticmethod
    def _out(ds: Dataset) -> Path:
        return ds.path.with_name(ds.path.stem + ".out.csv")

    def _restore(self, ds: Dataset) -> Path:
        """Fresh, fsync'ed working copy (untimed, before every run of a modifying task)."""
        work = self._work(ds)
        self._out(ds).unlink(missing_ok=True)
        for stale in ds.path.parent.glob(ds.path.stem + ".work.csv?*"):  # tools' temp files
            stale.unlink(missing_ok=True)
        shutil.copyfile(ds.path, work)
        fd = os.open(work, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        return work

    def _cleanup(self, ds: Dataset) -> None:
        self._work(ds).unlink(missing_ok=True)
        self._out(ds).unlink(missing_ok=True)

    # ----------------------------------------------------------------- tasks

    def _tasks(self) -> tuple[Task, ...]:
        def few(size: Size, n: int) -> int:  # CPU-bound tasks on the large size
            return 1 if size.nbytes > LARGE else n

        def big(size: Size) -> str:
            return "prime" if size.nbytes > LARGE else "run"

        def rewritten(path: Path, result: Any) -> Any:
            return file_digest(result if isinstance(result, Path) else path)

        restore, cleanup = self._restore, self._cleanup
        return (
            Task("count_lines", "count lines", baseline="wc",
                 note="the number of `\\n` bytes (the file ends with one, so also the number "
                      "of lines for `grep -c ''`, `rg -c ''` and Python)."),
            Task("count_absent", f'count "{ABSENT}" (absent)', baseline="grep",
                 note=f"occurrences of `{ABSENT}`, which never occurs (no field has more "
                      "than 6 digits in a row): the whole file is searched. All digits, like "
                      "the data, so prefilters on rare bytes find many candidates."),
            Task("find_first", "find the first occurrence (near the start)", baseline="grep",
                 throughput=False,
                 note="byte offset of the first occurrence of three fields of line 10 with "
                      "their commas (a string within the first few kB; see the sizes' "
                      "`find_needle` in the JSON); every tool stops at the first match."),
            Task("regex_literal", f"regex count `{REGEX_LITERAL}` (literal prefix)",
                 baseline="grep", repeats=few, warmup=big,
                 note=f"lines matching `{REGEX_LITERAL}` (GNU `grep -c` semantics: matching "
                      "lines, not matches; ~14 % of the lines). Its literal prefix lets a "
                      "search jump between candidates. CPU-bound, so on the large size it "
                      "is timed once per cache state after reading the file once."),
            Task("regex_class", f"regex count `{REGEX_CLASS}` (no literal prefix)",
                 baseline="grep", repeats=few, warmup=big,
                 note=f"lines matching `{REGEX_CLASS}` (~20 % of the lines): it starts with "
                      "a character class and its only literals (`,` `.`) are in every "
                      "field, so the regex engine itself does the work. Once per cache "
                      "state on the large size, like the other regex."),
            Task("replace_same", "replace `,` → `;` in place", baseline="sed",
                 repeats=few, warmup=big, setup=restore, check=rewritten,
                 teardown=cleanup,
                 note="every comma (99 per line) becomes a semicolon. Before every run "
                      "(untimed) the file is restored from the pristine copy and fsync'ed; "
                      "after every run (untimed) the result is hashed and must be identical "
                      "across contenders (`tr`'s output file is hashed in place of the "
                      "input). mmapkit must also print the number of replacements, checked "
                      "against the file's comma count. Only `mmapkit --sync` makes the "
                      "result durable; `sed -i` and `sd` rename a new file over the old "
                      "one without fsync. `sed -i` runs at ~100 MB/s, so on the large size "
                      "every contender is timed once per cache state (after reading the "
                      "file once)."),
            Task("replace_grow", "replace `,` → `, ` (file grows)", baseline="sed",
                 repeats=few, warmup=big, setup=restore, check=rewritten,
                 teardown=cleanup,
                 note="every comma becomes comma-space: the file grows by ~17 %, so nobody "
                      "can work in place; mmapkit writes a temporary file, fsyncs and "
                      "renames it (its contract). The peak RSS column shows each tool's "
                      "memory (mmapkit's target: ≤ 64 MiB at any size); the RSS of a "
                      "process that maps the file counts the mapped pages it touched. Same "
                      "restore/hash/once-on-large rules as the same-length replace."),
            Task("keep_first", "keep the first line (truncate)", baseline="sed",
                 throughput=False, setup=restore, check=rewritten, teardown=cleanup,
                 note="truncate the file after its first line (the article's task 1). The "
                      "file is restored before every run, like the replaces."),
            Task("bandwidth", "bandwidth reference: all-core sum of the file",
                 baseline="mmap scan",
                 note=f"not a contest: a compiled helper sums the file as 64-bit words with "
                      f"one thread per core ({_threads()} here), through a populated mapping "
                      "or through pread, in the same run and cache state as the others; the "
                      "faster one's GB/s is the \"limit\" the throughput tables compare with "
                      "(memory bandwidth with a warm cache, the disk with a cold one; cold, it "
                      "is only indicative: the helpers do nothing about readahead, so a tool "
                      "can beat it, > 100 %)."),
        )

    # ----------------------------------------------------------------- contenders

    def _need(self, label: str, key: str) -> Any:
        return self._info[label][key]

    def _label_of(self, path: Path) -> str:
        for label, info in self._info.items():
            if path.name.startswith(f"files-csv-{info['nbytes']}-"):
                return label
        raise RuntimeError(f"no dataset for {path}")

    def _contenders(self) -> tuple[Contender, ...]:
        suite = self
        F = "FILE"

        def info(path: Path, key: str) -> Any:
            return suite._need(suite._label_of(path), key)

        def needle(path: Path) -> str:
            return info(path, "find_needle")

        # ---- classic tools
        def wc_impls() -> dict[str, Callable[[Path], Any]]:
            wc = _need_tool("wc")
            return {"count_lines": lambda p: _count([wc, "-l", str(p)])}

        def grep_impls() -> dict[str, Callable[[Path], Any]]:
            g = _need_tool("grep")
            return {
                "count_lines": lambda p: _count([g, "-c", "", str(p)]),
                "count_absent": lambda p: _count([g, "-c", "-F", ABSENT, str(p)]),
                "find_first": lambda p: _offset([g, "-m1", "-b", "-o", "-F", needle(p), str(p)]),
                "regex_literal": lambda p: _count([g, "-c", "-E", REGEX_LITERAL, str(p)]),
                "regex_class": lambda p: _count([g, "-c", "-E", REGEX_CLASS, str(p)]),
            }

        def sed_impls() -> dict[str, Callable[[Path], Any]]:
            s = _need_tool("sed")
            return {
                "replace_same": lambda p: _modify([s, "-i", "s/,/;/g", str(p)]),
                "replace_grow": lambda p: _modify([s, "-i", "s/,/, /g", str(p)]),
                "keep_first": lambda p: _modify([s, "-i", "1q", str(p)]),
            }

        def tr_impls() -> dict[str, Callable[[Path], Any]]:
            t = _need_tool("tr")

            def same(p: Path) -> Measured:
                out = p.with_name(p.name.replace(".work.csv", ".out.csv"))
                return _modify([t, ",", ";"], stdin=p, stdout=out, result=out)
            return {"replace_same": same}

        # ---- modern peers
        def rg_impls() -> dict[str, Callable[[Path], Any]]:
            rg = _need_tool("rg")
            return {
                "count_lines": lambda p: _count([rg, "-c", "", str(p)]),
                "count_absent": lambda p: _count([rg, "-c", "-F", ABSENT, str(p)]),
                "find_first": lambda p: _offset([rg, "-m1", "-b", "-o", "-F", needle(p), str(p)]),
                "regex_literal": lambda p: _count([rg, "-c", REGEX_LITERAL, str(p)]),
                "regex_class": lambda p: _count([rg, "-c", REGEX_CLASS, str(p)]),
            }

        def sd_impls() -> dict[str, Callable[[Path], Any]]:
            sd = _need_tool("sd")
            return {
                "replace_same": lambda p: _modify([sd, "-F", ",", ";", str(p)]),
                "replace_grow": lambda p: _modify([sd, "-F", ",", ", ", str(p)]),
            }

        # ---- the article's approaches, Python, the bandwidth reference
        def naive_impls() -> dict[str, Callable[[Path], Any]]:
            h = str(helper())
            return {"count_lines": lambda p: _count([h, "count-lines", str(p)])}

        def rewrite_impls() -> dict[str, Callable[[Path], Any]]:
            h = str(helper())
            return {"keep_first": lambda p: _modify([h, "keep-first", str(p)])}

        def scan_impls(how: str) -> Callable[[], dict[str, Callable[[Path], Any]]]:
            def make() -> dict[str, Callable[[Path], Any]]:
                h = str(helper())
                n = str(_threads())
                return {"bandwidth": lambda p: _count([h, f"scan-{how}", str(p), n])}
            return make

        def python_count_lines(path: Path) -> int:
            n = 0
            with open(path, "rb") as f:
                for _line in f:
                    n += 1
            return n

        # ---- mmapkit
        def mk_impls(strategy: str | None, threads: int | None, sync: bool = False,
                     tasks: tuple[str, ...] | None = None) -> Callable[[], dict]:
            def make() -> dict[str, Callable[[Path], Any]]:
                exe = str(mmapkit_bin())
                opts = (["--strategy", strategy] if strategy else []) + \
                       (["--threads", str(threads)] if threads else [])
                impls: dict[str, Callable[[Path], Any]] = {
                    "count_lines": lambda p: _count([exe, "count", "--lines", *opts, str(p)],
                                                    strict=True),
                    "count_absent": lambda p: _count([exe, "count", *opts, ABSENT, str(p)],
                                                     strict=True),
                    "find_first": lambda p: _offset([exe, "find", *opts, needle(p), str(p)]),
                    "regex_literal": lambda p: _count(
                        [exe, "grep", "-c", *opts, REGEX_LITERAL, str(p)], strict=True),
                    "regex_class": lambda p: _count(
                        [exe, "grep", "-c", *opts, REGEX_CLASS, str(p)], strict=True),
                    "replace_same": lambda p: _modify(
                        [exe, "replace", "-F", *(["--sync"] if sync else []), *opts, ",", ";",
                         str(p)], expect=info(p, "commas")),
                    "replace_grow": lambda p: _modify(
                        [exe, "replace", "-F", *opts, ",", ", ", str(p)],
                        expect=info(p, "commas")),
                    "keep_first": lambda p: _modify([exe, "keep-lines", *opts, "1", str(p)]),
                }
                return {k: v for k, v in impls.items() if tasks is None or k in tasks}
            return make

        def mk_commands(strategy: str | None, threads: int | None, sync: bool = False,
                        tasks: tuple[str, ...] | None = None) -> dict[str, str]:
            o = (f" --strategy {strategy}" if strategy else "") + \
                (f" --threads {threads}" if threads else "")
            cmds = {
                "count_lines": f"mmapkit count --lines{o} {F}",
                "count_absent": f"mmapkit count{o} {ABSENT} {F}",
                "find_first": f"mmapkit find{o} NEEDLE {F}",
                "regex_literal": f"mmapkit grep -c{o} '{REGEX_LITERAL}' {F}",
                "regex_class": f"mmapkit grep -c{o} '{REGEX_CLASS}' {F}",
                "replace_same": f"mmapkit replace -F{' --sync' if sync else ''}{o} , ';' {F}",
                "replace_grow": f"mmapkit replace -F{o} , ', ' {F}",
                "keep_first": f"mmapkit keep-lines{o} 1 {F}",
            }
            return {k: v for k, v in cmds.items() if tasks is None or k in tasks}

        mk_note = ("the mmapkit CLI ($MMAPKIT_BIN, default target/release/mmapkit) with its "
                   "defaults: `--strategy auto`, `--threads` = all cores")
        variants = []
        for strategy in ("mmap", "read"):
            for threads in (None, 1):
                name = f"mmapkit {strategy}" + (" -t1" if threads else "")
                variants.append(Contender(
                    name, mk_impls(strategy, threads, tasks=("count_lines",)),
                    available=_mmapkit_available,
                    commands=mk_commands(strategy, threads, tasks=("count_lines",)),
                    note=f"`--strategy {strategy}`"
                         + (", one thread" if threads else ", all cores")
                         + " (count lines only)."))
        read_tasks = ("count_lines", "count_absent", "regex_literal", "regex_class")
        return (
            Contender("wc", wc_impls, commands={"count_lines": f"wc -l {F}"},
                      note="GNU coreutils `wc -l`."),
            Contender("grep", grep_impls,
                      commands={"count_lines": f"grep -c '' {F}",
                                "count_absent": f"grep -c -F {ABSENT} {F}",
                                "find_first": f"grep -m1 -b -o -F NEEDLE {F}",
                                "regex_literal": f"grep -c -E '{REGEX_LITERAL}' {F}",
                                "regex_class": f"grep -c -E '{REGEX_CLASS}' {F}"},
                      note="GNU grep (LC_ALL=C, its fastest mode); output to a pipe, never "
                           "/dev/null (GNU grep stops at the first match when it sees "
                           "/dev/null)."),
            Contender("rg", rg_impls, available=_tool_available("rg", _BENCH_TOOLS),
                      commands={"count_lines": f"rg -c '' {F}",
                                "count_absent": f"rg -c -F {ABSENT} {F}",
                                "find_first": f"rg -m1 -b -o -F NEEDLE {F}",
                                "regex_literal": f"rg -c '{REGEX_LITERAL}' {F}",
                                "regex_class": f"rg -c '{REGEX_CLASS}' {F}"},
                      note="ripgrep 15 (`make bench-tools`: `cargo install --locked "
                           "ripgrep@^15` into .venv/tools), default options; it searches one "
                           "file with one thread. `rg -c` prints nothing for no match (= 0)."),
            Contender("sed", sed_impls,
                      commands={"replace_same": f"sed -i 's/,/;/g' {F}",
                                "replace_grow": f"sed -i 's/,/, /g' {F}",
                                "keep_first": f"sed -i 1q {F}"},
                      note="GNU sed `-i`: writes a temporary file in the same directory and "
                           "renames it over the original (no fsync)."),
            Contender("sd", sd_impls, available=_tool_available("sd", _BENCH_TOOLS),
                      commands={"replace_same": f"sd -F , ';' {F}",
                                "replace_grow": f"sd -F , ', ' {F}"},
                      note="sd 1.0 (`make bench-tools`), in place: it maps the input, builds "
                           "the output in memory and renames a temporary file over the "
                           "original."),
            Contender("tr", tr_impls, commands={"replace_same": f"tr , ';' < {F} > NEW"},
                      note="GNU `tr` from the file to a new file (stdin/stdout redirected by "
                           "the harness, no shell); its output file is what is hashed."),
            Contender("naive loop", naive_impls,
                      commands={"count_lines": f"files-helper count-lines {F}"},
                      note="the article's style in Rust (compiled by the suite with `rustc -O` "
                           "into bench/data/tools/): `File::read` into a 64 KiB buffer, a "
                           "plain `for &b in &buf[..n] { if b == b'\\n' { count += 1 } }`."),
            Contender("python", {"count_lines": python_count_lines},
                      commands={"count_lines": 'for line in open(FILE, "rb"): n += 1'},
                      note="in-process Python (no process start, no RSS measured): "
                           "`for line in f` over the file opened in binary mode, at every "
                           "size (the lines are ~570 bytes long, so it is not as slow as "
                           "it is on short lines)."),
            Contender("read+rewrite", rewrite_impls,
                      commands={"keep_first": f"files-helper keep-first {F}"},
                      note="the article's standard-I/O truncation in Rust (compiled helper, "
                           "not Python, so that it is not slowed down by the language): "
                           "`read_to_end` the whole file, `position` of the first `\\n`, copy "
                           "that line, `File::create` (truncates) and `write_all` it. Its "
                           "peak RSS is the file's size."),
            Contender("mmapkit", mk_impls(None, None), available=_mmapkit_available,
                      commands=mk_commands(None, None), note=mk_note + "."),
            Contender("mmapkit -t1", mk_impls(None, 1, tasks=read_tasks),
                      available=_mmapkit_available, commands=mk_commands(None, 1, tasks=read_tasks),
                      note="`--threads 1`: what one core does (grep, rg, wc, sed use one)."),
            *variants,
            Contender("mmapkit --sync", mk_impls(None, None, sync=True, tasks=("replace_same",)),
                      available=_mmapkit_available,
                      commands=mk_commands(None, None, sync=True, tasks=("replace_same",)),
                      note="`replace --sync`: the in-place result is flushed to disk (msync/"
                           "fsync) before the command returns; the issue's target for the "
                           "same-length replace is about this one."),
            Contender("mmap scan", scan_impls("mmap"),
                      commands={"bandwidth": f"files-helper scan-mmap {F} {_threads()}"},
                      note="bandwidth reference (compiled helper): one thread per core maps "
                           "its contiguous share of the file read-only with `MAP_POPULATE` "
                           "(no page faults) and sums it as `u64` words (wrapping add)."),
            Contender("read scan", scan_impls("read"),
                      commands={"bandwidth": f"files-helper scan-read {F} {_threads()}"},
                      note="bandwidth reference (compiled helper): one thread per core "
                           "`pread`s its share into a 256 KiB buffer and sums it the same "
                           "way (same answer as `mmap scan`)."),
        )

    # ----------------------------------------------------------------- report

    def versions(self) -> dict[str, str]:
        v = {
            "mmapkit CLI": f"{_version([str(mmapkit_bin()), '--version'])} ({mmapkit_bin()})",
            "wc": _version([_tool("wc") or "wc", "--version"]),
            "grep": _version([_tool("grep") or "grep", "--version"]),
            "sed": _version([_tool("sed") or "sed", "--version"]),
            "tr": _version([_tool("tr") or "tr", "--version"]),
            "rg": _version([_tool("rg") or "rg", "--version"]),
            "sd": _version([_tool("sd") or "sd", "--version"]),
            "rustc (helpers)": _version([shutil.which("rustc") or "rustc", "--version"]),
        }
        return v

    def targets(self, doc: dict[str, Any]) -> list[dict[str, Any]]:
        large = next((s for s in doc["sizes"] if s["label"] == "large"), None)
        if large is None:
            return []
        at = "" if large["nbytes"] >= (4 << 30) else \
            f" (stated for 4 GiB; this run: {large['human']})"

        def goal(label: str, task: str, contender: str, versus: str, speedup: float,
                 **extra: Any) -> dict[str, Any]:
            return {"label": label + at, "task": task, "contender": contender,
                    "versus": versus, "min_speedup": speedup, "size": "large",
                    "cache": "warm", **extra}

        return [
            goal("count lines: mmapkit ≥ 2× wc -l", "count_lines", "mmapkit", "wc", 2),
            goal("absent-string count: mmapkit ≥ 1.8× rg -F", "count_absent", "mmapkit", "rg",
                 1.8),
            goal("regex count, literal prefix: mmapkit ≥ 1.6× rg", "regex_literal", "mmapkit",
                 "rg", 1.6),
            goal("regex count, no literal prefix: mmapkit never below 0.95× rg",
                 "regex_class", "mmapkit", "rg", 0.95),
            goal("same-length replace incl. fsync: mmapkit --sync ≥ 50× sed -i",
                 "replace_same", "mmapkit --sync", "sed", 50),
            goal("different-length replace: mmapkit ≥ 5× sd, in ≤ 64 MiB", "replace_grow",
                 "mmapkit", "sd", 5, max_metric={"peak_rss": 64 << 20}),
            goal("keep the first line: mmapkit ≥ 2× sed -i 1q", "keep_first", "mmapkit", "sed",
                 2),
        ]

    notes = (
        "Data: `bench/suites/files.py` generates the CSV with numpy from a fixed seed: 100 "
        "columns, each either integers of 1–6 digits or decimals with 1–4 integer digits and "
        "two decimals, some columns with negative values; ~570 bytes per line. The first "
        "65,536 lines are generated row by row; every later line joins the first 50 fields of "
        "one of them with the last 50 of another (seeded picks), which keeps generation at "
        "disk speed. The small file is a prefix of the large one; both end with a newline "
        "(sizes are the nominal ones: the file stops at the last whole line that fits).",
        "All commands run with LC_ALL=C, as subprocesses started from Python (`Popen`, "
        "~1 ms each, included in every CLI contender's time: on the small size that start-up "
        "is most of what is measured).",
        "Peak RSS is measured for the tasks that rewrite the file (replaces, keep the first "
        "line): those commands run under a tiny compiled wrapper (`files-helper rss CMD`) "
        "that reports the child's `ru_maxrss` from `wait4` (started directly from Python, a "
        "child's figure would include the Python process's own memory). The wrapper adds "
        "one more process start (~0.5 ms) to every contender of those tasks alike. RSS counts "
        "the pages of the file a process maps and touches.",
        "Cold runs drop the whole page cache (when root), which includes the tools' own "
        "binaries: on the small size a cold run mostly measures loading the program.",
        "Repeats: the regex tasks and the replaces run once per cache state on the large size "
        "(their slow contenders take tens of seconds per run there), with a plain read of "
        "the data as the warm-up; all other cells use the default number of runs.",
        "Run time on a 2-core VM: `--quick` (16 MiB, warm cache only) ~1 min, full (4 GiB) "
        "~36 min, most of it in `sed -i` and `sd` on the large file and in restoring (copy "
        "+ fsync) the file before every run of the rewriting tasks. The large size needs 3x "
        "its size of free disk (checked before generating).",
        "The targets are the issue's, for a warm cache and the 4 GiB file; speed-up = the "
        "other tool's median time / mmapkit's (mmapkit with its defaults, except "
        "`mmapkit --sync` for the same-length replace).",
    )
