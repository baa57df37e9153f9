"""mmapkit: memory-mapped I/O that is safe to use on real files.

Two ways in:

* ``mmapkit.mmap`` is a drop-in for the stdlib ``mmap.mmap`` (same
  constructor, methods, constants and errors, checked with CPython's own
  test suite), so ``import mmapkit as mmap`` or ``from mmapkit import mmap``
  is the whole migration.
* ``mmapkit.open(path, mode)`` returns a :class:`MappedFile` that adds empty
  files, any offset, growth that never invalidates views, zero-copy numpy
  views, advice, populate, ranged flush, fast ``count``/``find_all`` and
  pickling by path.

Whole-file tools run on every core over one file, by mmap or pread
(``strategy="auto"|"mmap"|"read"``, or ``"stream"``: read front to back, as
FIFOs, ``"-"`` (stdin) and /proc files always are): :func:`count`, :func:`find`,
:func:`find_all`, :func:`grep`, :func:`grep_count`, :func:`replace` (in place
when lengths match, else atomically through a temporary file) and
:func:`keep_lines` (truncate after line N, no rewrite).

``threads=`` means the same in every function that takes it (the tools,
:func:`kmers`, :mod:`mmapkit.stats`, :meth:`CommitLog.verify`): ``None`` or
``0`` (the default) one thread per core, ``1`` sequential, ``n`` workers;
results never depend on it.

Parallel writers: :class:`RecordWriter` writes fixed-width records by index
from any thread straight into a mapped output (renamed into place when
finished); :func:`kmers` turns FASTA/FASTQ reads into canonical k-mer
frequency vectors (a numpy array, or csv/tsv/npy written in parallel).

Arrays: :class:`ArrayStore` (a ``.npy`` file whose first axis grows, readable
by ``np.load(mmap_mode="r")`` at any moment), :class:`FeatureStore` (feature
vectors and labels for out-of-core training: atomic batch commits, zero-copy
and shuffled batches; :mod:`mmapkit.ml` trains on it), :class:`TokenStore`
(variable-length records, e.g. token ids, as plain ``values.npy`` +
``offsets.npy`` files, with rank-sharded, resumable window and packing
samplers in :mod:`mmapkit.tokens`), :func:`sparse` (an instantly
created sparse file), :class:`SharedArray` (numpy arrays in shared memory,
reference-counted, pickled by name; module :mod:`mmapkit.shared_memory`) and
:func:`mmapkit.parallel.map_chunks` (chunk-parallel map over processes that
each map the array by path).

:class:`CommitLog` is a segmented, checksummed, crash-safe write-ahead log
(Raft-style ``append``/``read``/``truncate_after``/``purge_before``, group
commit, recovery of a torn tail).

Everything raises :class:`FileTruncatedError` (an ``OSError``) instead of
crashing with SIGBUS when another process truncates the mapped file, also
with ``faulthandler`` or PyTorch's DataLoader workers installed after it
(see the README's "Truncation is an error, not a crash").
"""

from __future__ import annotations

import builtins
import mmap as _stdlib_mmap
from mmap import (  # the platform's constants, re-exported for drop-in use
    ALLOCATIONGRANULARITY,
    MADV_DONTNEED,
    MADV_NORMAL,
    MADV_RANDOM,
    MADV_SEQUENTIAL,
    MADV_WILLNEED,
    MAP_ANONYMOUS,
    MAP_PRIVATE,
    MAP_SHARED,
    PAGESIZE,
    PROT_EXEC,
    PROT_READ,
    PROT_WRITE,
)

from . import (
    ml,  # out-of-core training: mmapkit.ml.StreamingLogisticRegression
    parallel,
    shared_memory,
    stats,  # exact out-of-core statistics: mmapkit.stats.median(...)
    tokens,  # token data: mmapkit.tokens.WindowSampler, PackedSampler
)
from ._guard import install as _install_guard
from ._native import (
    ACCESS_COPY,
    ACCESS_DEFAULT,
    ACCESS_READ,
    ACCESS_WRITE,
    CommitLog,
    CorruptError,
    DiskFullError,
    FailedError,
    FileTruncatedError,
    FormatError,
    MappedFile,
    RecordWriter,
    ReservationExhaustedError,
    __version__,
    count,
    drop_cache,
    find,
    find_all,
    grep,
    grep_count,
    keep_lines,
    kmer_labels,
    kmers,
    mmap,
    page_size,
    replace,
)
from ._types import PathLike
from .features import FeatureStore
from .shared_memory import SharedArray
from .store import ArrayStore, sparse
from .tokens import TokenStore

# faulthandler and PyTorch's DataLoader workers install SIGBUS handlers
# after ours: keep the truncation guard in front of them (mmapkit._guard).
_install_guard()

#: ``mmap.error`` is ``OSError`` in the stdlib; so it is here.
error = OSError

# Every other MADV_*/MAP_* constant this platform's stdlib module has.
globals().update(
    {k: v for k, v in vars(_stdlib_mmap).items() if k.startswith(("MADV_", "MAP_", "MFD_"))}
)

__all__ = [
    "ACCESS_COPY",
    "ACCESS_DEFAULT",
    "ACCESS_READ",
    "ACCESS_WRITE",
    "ALLOCATIONGRANULARITY",
    "MADV_DONTNEED",
    "MADV_NORMAL",
    "MADV_RANDOM",
    "MADV_SEQUENTIAL",
    "MADV_WILLNEED",
    "MAP_ANONYMOUS",
    "MAP_PRIVATE",
    "MAP_SHARED",
    "PAGESIZE",
    "PROT_EXEC",
    "PROT_READ",
    "PROT_WRITE",
    "ArrayStore",
    "CommitLog",
    "CorruptError",
    "DiskFullError",
    "FailedError",
    "FeatureStore",
    "FileTruncatedError",
    "FormatError",
    "MappedFile",
    "RecordWriter",
    "ReservationExhaustedError",
    "SharedArray",
    "TokenStore",
    "__version__",
    "count",
    "drop_cache",
    "error",
    "find",
    "find_all",
    "grep",
    "grep_count",
    "keep_lines",
    "kmer_labels",
    "kmers",
    "ml",
    "mmap",
    "open",
    "page_size",
    "parallel",
    "replace",
    "shared_memory",
    "sparse",
    "stats",
    "tokens",
]


def open(
    path: PathLike,
    mode: str = "r",
    size: int | None = None,
    offset: int = 0,
    length: int | None = None,
    *,
    reserve: int | None = None,
) -> MappedFile:
    """Map ``path`` and return a :class:`MappedFile`.

    ``mode``: ``"r"`` read-only, ``"r+"`` read-write (shared, writes reach
    the file), ``"w+"`` create or truncate then read-write, ``"c"``
    copy-on-write (writes stay private). ``size`` makes a writable file at
    least that many bytes (allocated up front, so a full disk raises
    :class:`DiskFullError` here rather than SIGBUS later). ``offset`` may be
    any byte offset; ``length=None`` maps to the end of the file (and
    :meth:`MappedFile.refresh` follows the file as it grows). Empty files
    are fine.

    >>> with mmapkit.open("data.bin", "w+", size=4096) as m:
    ...     m[:5] = b"hello"
    ...     m.grow(4096)                    # the new length; views taken before stay valid
    8192
    """
    return MappedFile(path, mode, size, offset, length, reserve)


def _reopen_mmap(path: str, access: int, offset: int, length: int) -> mmap:
    """Unpickles an ``mmapkit.mmap`` by mapping its file again."""
    file_mode = "rb" if access == ACCESS_READ else "r+b"
    with builtins.open(path, file_mode) as f:
        return mmap(f.fileno(), length, access=access, offset=offset)
