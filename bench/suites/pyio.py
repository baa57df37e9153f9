"""Suite `pyio`: the five comparisons of the "Python mmap: Improved File I/O With
Memory Mapping" article, on plain file I/O, the stdlib mmap, mmapkit's drop-in
mmap and mmapkit's native API.

Tasks (every contender computes the same answer; it is checked on every run):

1. ``read``      read the whole file                     -> the bytes (checked by length + SHA-1)
2. ``find``      first occurrence of b" the "            -> its offset
3. ``regex``     all five-letter words, rb"\\b[a-zA-Z]{5}\\b" -> (count, BLAKE2b of the matches)
4. ``seek_find`` seek to 10000, then find b" the "       -> absolute offset
5. ``replace``   b" the " -> b" eht " in place, on a fresh copy restored (untimed) before
                 every run                               -> SHA-1 of the resulting file
"""

from __future__ import annotations

import hashlib
import mmap
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..contenders import mmapkit_has, mmapkit_module
from ..harness import above, buffer_digest, capped, file_digest, fresh_copy, module_version, primed
from ..suite import Contender, Dataset, Size, Suite, Task, Unavailable
from ._textgen import ensure_text_file

WORD = b" the "
REPLACEMENT = b" eht "
SEEK_TO = 10_000
FIVE_LETTER_WORD = re.compile(rb"\b[a-zA-Z]{5}\b")
LARGE = 64 << 20  # sizes above this are "large" (fewer regex repeats)


def _more_runs(_size: Size, n: int) -> int:
    """``Task.repeats`` of the microsecond tasks: three times the default."""
    return 3 * n


_CHUNK = 1 << 20  # offsets scattered per numpy assignment in mmapkit.open's replace


def five_letter_words(buf: Any) -> tuple[int, str]:
    """Count and hash of all five-letter words in any bytes-like object.

    Returns a digest, not the list: at 1 GiB the list would be ~20 M objects.
    Same code for every contender (only the buffer type differs).
    """
    h = hashlib.blake2b(digest_size=16)
    n = 0
    for m in FIVE_LETTER_WORD.finditer(buf):
        h.update(m[0])
        n += 1
    return n, h.hexdigest()


# --------------------------------------------------------------------------- file (baseline)


def file_read(path: Path) -> bytes:
    """Reads the whole file with ``read()``."""
    with open(path, "rb") as f:
        return f.read()


def stream_find(f: Any, needle: bytes, start: int = 0, chunk: int = 1 << 20) -> int:
    """First offset of `needle` at or after `start`, reading `chunk` bytes at a time
    into one reusable buffer and stopping at the first match: the fair read()
    way (the article reads the whole file first, which no careful program does)."""
    buf = bytearray(chunk + len(needle) - 1)
    view = memoryview(buf)
    f.seek(start)
    carry = 0  # bytes kept from the previous chunk so matches across the edge are found
    pos = start  # file offset of buf[0]
    while True:
        n = f.readinto(view[carry : carry + chunk])
        if not n:
            return -1
        filled = carry + n
        i = buf.find(needle, 0, filled)
        if i >= 0:
            return pos + i
        carry = min(len(needle) - 1, filled)
        buf[:carry] = buf[filled - carry : filled]
        pos += filled - carry


def file_find(path: Path) -> int:
    """Finds the word by streaming the file in chunks."""
    with open(path, "rb", buffering=0) as f:
        return stream_find(f, WORD)


def file_regex(path: Path) -> tuple[int, str]:
    """Runs the five-letter-word regex over the file read whole."""
    with open(path, "rb") as f:
        return five_letter_words(f.read())


def file_seek_find(path: Path) -> int:
    """Seeks near the end, then finds the word by streaming."""
    with open(path, "rb", buffering=0) as f:
        return stream_find(f, WORD, SEEK_TO)


def file_replace(path: Path) -> None:
    """Replaces the word through a temporary file, fsync and rename (the safe rewrite)."""
    # The safe way to rewrite a file: new contents to a temporary file in the same
    # directory, fsync (mmap's flush() is an msync(MS_SYNC), so both are durable),
    # then atomically rename over the original.
    with open(path, "rb") as f:
        data = f.read()
    new = data.replace(WORD, REPLACEMENT)
    del data
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(new)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


# ------------------------------------------------------------ mmap-style (stdlib + drop-in)


def mmap_style(mod: Any) -> dict[str, Callable[[Path], Any]]:
    """The stdlib-mmap code of the article, for the module `mod` (mmap or mmapkit)."""

    def read(path: Path) -> bytes:
        with open(path, "rb") as f, mod.mmap(f.fileno(), 0, access=mod.ACCESS_READ) as m:
            return m.read()

    def find(path: Path) -> int:
        with open(path, "rb") as f, mod.mmap(f.fileno(), 0, access=mod.ACCESS_READ) as m:
            return m.find(WORD)

    def regex(path: Path) -> tuple[int, str]:
        with open(path, "rb") as f, mod.mmap(f.fileno(), 0, access=mod.ACCESS_READ) as m:
            return five_letter_words(m)

    def seek_find(path: Path) -> int:
        with open(path, "rb") as f, mod.mmap(f.fileno(), 0, access=mod.ACCESS_READ) as m:
            m.seek(SEEK_TO)
            return m.find(WORD)  # mmap.find starts at the current position

    def replace(path: Path) -> None:
        with open(path, "r+b") as f, mod.mmap(f.fileno(), 0, access=mod.ACCESS_WRITE) as m:
            data = m.read()
            new = data.replace(WORD, REPLACEMENT)
            del data
            m[:] = new
            m.flush()

    return {"read": read, "find": find, "regex": regex, "seek_find": seek_find, "replace": replace}


# --------------------------------------------------------------------------- mmapkit


def _need(obj: Any, name: str) -> Any:
    try:
        return getattr(obj, name)
    except AttributeError:
        raise Unavailable(f"MappedFile has no {name}()") from None


def native_impls(mk: Any) -> dict[str, Callable[[Path], Any]]:
    """The same tasks with mmapkit's native API (`mk` is the mmapkit module)."""
    import numpy as np

    new = np.frombuffer(REPLACEMENT, dtype=np.uint8)
    span = np.arange(len(WORD), dtype=np.int64)

    def read(path: Path) -> bytes:
        with mk.open(path, "r") as m:
            return m.read()  # large reads of shared maps copy with pread (see Map::read_into)

    def find(path: Path) -> int:
        with mk.open(path, "r") as m:
            return m.find(WORD)

    def regex(path: Path) -> tuple[int, str]:
        with mk.open(path, "r") as m:
            return five_letter_words(m)

    def seek_find(path: Path) -> int:
        with mk.open(path, "r") as m:
            return m.find(WORD, SEEK_TO)

    def replace(path: Path) -> None:
        with mk.open(path, "r+") as m:
            offsets = _need(m, "find_all")(WORD)
            view = _need(m, "numpy")()
            for start in range(0, len(offsets), _CHUNK):
                chunk = offsets[start : start + _CHUNK]
                view[chunk[:, None] + span] = new
            del view
            m.flush()

    return {"read": read, "find": find, "regex": regex, "seek_find": seek_find, "replace": replace}


# --------------------------------------------------------------------------- suite


class PyioSuite(Suite):
    """The ``pyio`` suite: the five comparisons of the Python mmap article."""

    name = "pyio"
    title = "the five comparisons of the Python mmap article"
    description = (
        "The five file-reading comparisons of the article *Python mmap: Improved File I/O "
        "With Memory Mapping* (read a whole file, find a word, a regex over the file, seek "
        "then find, search and replace in place), on a seeded English-like text the size "
        "of Don Quixote (2.4 MB) and on a large one, for plain file I/O, the standard "
        "library's `mmap`, mmapkit's drop-in `mmapkit.mmap` (the stdlib code with the "
        "module swapped) and mmapkit's native `mmapkit.open` API."
    )
    baseline = "file"
    headline = {
        "capability": "mmap from Python",
        "label": 'replace b" the " in place',
        "task": "replace",
        "contender": "mmapkit.open",
        "peers": ["file", "stdlib mmap"],
        "sizes": ["large"],
    }
    reference = "file"
    data_seed = 1

    tasks: tuple[Task, ...] = (
        Task(
            "read",
            "read whole file",
            digest=buffer_digest,
            note="returns the file's bytes; checked by length and SHA-1 (untimed).",
        ),
        Task(
            "find",
            'find first b" the "',
            repeats=_more_runs,
            note="offset of the first occurrence. The `file` contender streams 1 MiB "
            "chunks through one reusable buffer and stops at the first match (the "
            "article reads the whole file first, which would flatter mapping). "
            "Tens of microseconds warm: three times the default timed runs, to rank them.",
        ),
        Task(
            "regex",
            "five-letter words (regex)",
            repeats=capped(1, above(LARGE)),
            warmup=primed(above(LARGE)),
            note=r'`re.finditer(rb"\b[a-zA-Z]{5}\b", buf)` over the whole file, returning '
            "the number of matches and a BLAKE2b hash of them (same code for every "
            "contender, so the per-match hashing cost is the same everywhere). It is "
            "CPU-bound (~50 MB/s), so on the large size it is timed once per cache "
            "state and the warm-up is a plain read of the file instead of a run.",
        ),
        Task(
            "seek_find",
            'seek(10000), find b" the "',
            repeats=_more_runs,
            note="absolute offset of the first occurrence at or after 10000; three times "
            "the default timed runs, as `find`.",
        ),
        Task(
            "replace",
            'replace b" the " → b" eht " in place',
            note="same-length replacement of every non-overlapping occurrence. Before every "
            "run (untimed) the file is restored from the pristine copy and fsync'ed; "
            "after every run (untimed) the resulting file is hashed and must be "
            "byte-identical across contenders. Timed work includes making the result "
            "durable: `flush()` (msync) for the mapped contenders, `fsync` of the "
            "temporary file for `file`.",
        ),
    )

    def __init__(self) -> None:
        self._pristine: dict[str, Path] = {}
        self.tasks = tuple(self._bind(t) for t in type(self).tasks)
        self.contenders = (
            Contender(
                "file",
                {
                    "read": file_read,
                    "find": file_find,
                    "regex": file_regex,
                    "seek_find": file_seek_find,
                    "replace": file_replace,
                },
                note='`open(path, "rb")` and `read()`; find: 1 MiB `readinto` chunks into one '
                "reusable buffer, stopping at the first match; replace: read, `bytes.replace`, "
                "write a temporary file in the same directory, fsync, "
                "`os.replace`.",
            ),
            Contender(
                "stdlib mmap",
                mmap_style(mmap),
                note="`mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)` and the mmap "
                "methods (`read`, `find`, `seek`); replace: `ACCESS_WRITE`, read "
                "all, `bytes.replace`, `m[:] = new`, `flush()`.",
            ),
            Contender(
                "mmapkit.mmap",
                lambda: mmap_style(mmapkit_module()),
                available=mmapkit_has("mmap", "ACCESS_READ", "ACCESS_WRITE"),
                note="exactly the stdlib mmap code with `mmapkit.mmap`, "
                "`mmapkit.ACCESS_READ` and `mmapkit.ACCESS_WRITE` in place of "
                "the stdlib's.",
            ),
            Contender(
                "mmapkit.open",
                lambda: native_impls(mmapkit_module()),
                available=mmapkit_has("open"),
                note='the native API, `with mmapkit.open(path, "r") as m`: read = '
                "`m.read()`; find = `m.find`; "
                "regex = `re.finditer` over `m`; seek + find = "
                '`m.find(b" the ", 10000)`; replace = `mmapkit.open(path, "r+")`, '
                "`m.find_all` for the offsets, then one vectorised numpy "
                "assignment into `m.numpy()` per million matches, then "
                "`m.flush()`.",
            ),
        )

    def _bind(self, task: Task) -> Task:
        if task.name != "replace":
            return task
        return Task(
            task.name,
            task.title,
            setup=self._restore,
            check=lambda path, _result: file_digest(path),
            teardown=lambda ds: self._work_copy(ds).unlink(missing_ok=True),
            note=task.note,
        )

    def sizes(self, quick: bool) -> list[Size]:
        return [Size("small", 2_400_000), Size("large", (16 << 20) if quick else (1 << 30))]

    def prepare(self, size: Size, data_dir: Path, log: Callable[[str], None]) -> Dataset:
        path = ensure_text_file(data_dir, "pyio-text", self.data_seed, size.nbytes, log)
        with open(path, "rb") as f:
            head = f.read(SEEK_TO + (1 << 16))
        if WORD not in head[SEEK_TO:]:
            raise RuntimeError(f"{path}: generated text has no {WORD!r} after {SEEK_TO}")
        self._pristine[size.label] = path
        return Dataset(
            size, path, [path], {"generator": "bench/suites/_textgen.py", "seed": self.data_seed}
        )

    @staticmethod
    def _work_copy(dataset: Dataset) -> Path:
        return dataset.path.with_name(dataset.path.name.replace(".txt", ".work.txt"))

    def _restore(self, dataset: Dataset) -> Path:
        """Fresh, fsync'ed working copy of the data file for the replace task."""
        work = self._work_copy(dataset)
        work.with_name(work.name + ".tmp").unlink(missing_ok=True)
        return fresh_copy(dataset.path, work)

    def versions(self) -> dict[str, str]:
        return {"mmapkit": module_version("mmapkit")}

    notes = (
        "The data is generated text, not the real Don Quixote: a fixed 3,000-word vocabulary "
        'with Zipf-like frequencies (" the " is ~4.5 % of all words), sentences, '
        "punctuation, 72-column lines and paragraphs, from a fixed seed "
        "(bench/suites/_textgen.py); large files repeat a 4 MiB block with its lines in a "
        "different seeded order per block.",
        "Each contender's callable includes opening (and mapping) the file: it is the whole "
        "function of the article, not just the operation on an open object.",
    )
