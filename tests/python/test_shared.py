"""mmapkit.SharedArray: named and anonymous shared-memory arrays."""

import contextlib
import multiprocessing
import os
import pathlib
import pickle
import subprocess
import sys
import uuid

import numpy as np
import pytest

import mmapkit
from mmapkit import SharedArray


@pytest.fixture
def name():
    n = f"mmapkit-test-{uuid.uuid4().hex[:12]}"
    yield n
    with contextlib.suppress(FileNotFoundError):
        os.unlink(f"/dev/shm/{n}")


def test_create_attach_same_memory(name):
    a = SharedArray.create(name, (4, 5), "i4")
    assert (a.name, a.shape, a.dtype, a.nbytes, a.path) == (
        name,
        (4, 5),
        np.dtype("i4"),
        80,
        f"/dev/shm/{name}",
    )
    # The return types _native.pyi gives (stubtest checks only signatures).
    assert type(mmapkit._native.segment_path(name)) is str
    assert isinstance(a._core.path, pathlib.Path)
    assert (a.numpy() == 0).all()
    a[1] = 7
    b = SharedArray.attach(name)
    assert b.numpy()[1].tolist() == [7] * 5
    b[2, 3] = 9
    assert a[2, 3] == 9
    assert np.shares_memory(np.asarray(a), a.numpy())
    # The segment is a .npy file: numpy reads it too.
    assert np.load(a.path, mmap_mode="r")[2, 3] == 9
    ro = SharedArray.attach(name, readonly=True)
    assert not ro.numpy().flags.writeable
    with pytest.raises(FileExistsError):
        SharedArray.create(name, 3)
    with pytest.raises(ValueError, match="invalid shared-memory name"):
        SharedArray.create("a/b", 3)
    for h in (a, b, ro):
        h.close()
    assert not os.path.exists(f"/dev/shm/{name}")


def test_pickling_sends_the_name_not_the_data(name):
    a = SharedArray.create(name, (1 << 23,), "f8")  # 64 MiB
    a[-1] = 3.5
    blob = pickle.dumps(a)
    assert len(blob) < 300
    b = pickle.loads(blob)
    assert b[-1] == 3.5 and np.shares_memory(b.numpy(), b.numpy())
    b[0] = 1.0
    assert a[0] == 1.0


def _worker_add(arr, i):
    arr[i] += i + 1
    return arr.numpy().ctypes.data != 0


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_workers_attach_by_name(name, method):
    a = SharedArray.create(name, 8, "i8")
    ctx = multiprocessing.get_context(method)
    with ctx.Pool(2) as pool:
        assert all(pool.starmap(_worker_add, [(a, i) for i in range(8)]))
    assert a.numpy().tolist() == list(range(1, 9))
    assert os.path.exists(a.path), "workers closing must not unlink a segment we still hold"
    a.close()
    assert not os.path.exists(a.path)


CREATOR = """
import sys, mmapkit
a = mmapkit.SharedArray.create(sys.argv[1], 1000, "u2")
a[:] = 7
print("created", flush=True)
sys.stdin.readline()   # wait until the parent attached
"""


def test_segment_survives_its_creators_exit_while_attached(name):
    p = subprocess.Popen(
        [sys.executable, "-c", CREATOR, name],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert p.stdout.readline().strip() == "created"
    b = SharedArray.attach(name)
    p.stdin.write("go\n")
    p.stdin.close()
    assert p.wait(timeout=30) == 0
    assert os.path.exists(f"/dev/shm/{name}"), "creator exited but we still hold it"
    assert (b.numpy() == 7).all()
    c = SharedArray.attach(name)  # still attachable by name
    b.close()
    assert os.path.exists(f"/dev/shm/{name}")
    c.close()
    assert not os.path.exists(f"/dev/shm/{name}"), "the last holder removes the name"


def test_creator_alone_exiting_cleans_up(name):
    code = f"import mmapkit; mmapkit.SharedArray.create({name!r}, 10)"
    subprocess.run([sys.executable, "-c", code], check=True)
    assert not os.path.exists(f"/dev/shm/{name}")
    keep = f"import mmapkit; mmapkit.SharedArray.create({name!r}, 10, unlink_on_close=False)"
    subprocess.run([sys.executable, "-c", keep], check=True)
    assert os.path.exists(f"/dev/shm/{name}")
    SharedArray.attach(name).unlink()


def test_unlink_semantics(name):
    a = SharedArray.create(name, 4, "i4")
    b = SharedArray.attach(name, unlink_on_close=False)
    a[:] = 5
    a.unlink()
    assert not os.path.exists(f"/dev/shm/{name}")
    with pytest.raises(FileNotFoundError):
        SharedArray.attach(name)
    # Mappings stay valid and shared after unlink.
    b[0] = 1
    assert a.numpy().tolist() == [1, 5, 5, 5]
    a.unlink()  # twice is fine
    # The name is free again; the old handles never touch the new segment.
    c = SharedArray.create(name, 2, "i4")
    a.close()
    b.close()
    assert os.path.exists(f"/dev/shm/{name}")
    c.close()
    assert not os.path.exists(f"/dev/shm/{name}")


def test_copy_on_write_snapshots_stay_private(name):
    a = SharedArray.create(name, 1024, "i8")
    a[:] = 1
    snap = a.snapshot()
    assert snap.flags.writeable and (snap == 1).all()
    snap[:10] = 99
    assert (a.numpy() == 1).all()
    assert (SharedArray.attach(name, unlink_on_close=False).numpy() == 1).all()
    code = (
        "import mmapkit; import sys; "
        f"sys.exit(int(mmapkit.SharedArray.attach({name!r}).numpy()[:10].sum()))"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 10


def test_anonymous_arrays_are_shared_with_forked_children():
    a = SharedArray.anonymous((3, 4), "f4")
    pid = os.fork()
    if pid == 0:  # child: write and leave without cleanup
        a[1] = 2.5
        os._exit(0)
    os.waitpid(pid, 0)
    assert a[1].tolist() == [2.5] * 4 and a[0].tolist() == [0] * 4


def _anon_sum(arr):
    return float(arr.numpy().sum())


def test_anonymous_arrays_reach_spawned_workers_by_fd():
    a = SharedArray.anonymous(1000, "f8")
    a[:] = 0.5
    assert a.path.startswith("/proc/")
    assert len(pickle.dumps(a)) < 300
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        assert pool.apply(_anon_sum, (a,)) == 500.0


def test_too_big_for_dev_shm_is_a_clear_error(name):
    s = os.statvfs("/dev/shm")
    too_big = s.f_blocks * s.f_frsize + (1 << 30)
    with pytest.raises(mmapkit.DiskFullError) as e:
        SharedArray.create(name, too_big, "u1")
    assert e.value.filename == f"/dev/shm/{name}"
    assert not os.path.exists(f"/dev/shm/{name}"), "no half-made segment left"
    assert not [f for f in os.listdir("/dev/shm") if f.startswith(f".{name}")], (
        "no temporary file left"
    )


def test_small_tmpfs_full_is_disk_full_not_sigbus(small_tmpfs):
    with pytest.raises(mmapkit.DiskFullError):
        SharedArray.create("big", 2 << 20, "u1", dir=small_tmpfs)
    assert not (small_tmpfs / "big").exists()
    a = SharedArray.create("ok", 512 << 10, "u1", dir=small_tmpfs)
    a[:] = 1  # allocated up front: writing every page cannot SIGBUS
    a.close()


def test_forked_child_closing_an_inherited_handle_does_not_unlink(name):
    a = SharedArray.create(name, 4, "i4")
    pid = os.fork()
    if pid == 0:
        a[0] = 1
        a.close()  # the child's copy shares the parent's lock: no unlink
        del a
        import gc

        gc.collect()
        os._exit(0)
    os.waitpid(pid, 0)
    assert os.path.exists(f"/dev/shm/{name}") and a[0] == 1
    a.close()
    assert not os.path.exists(f"/dev/shm/{name}")


@pytest.mark.parametrize("dtype", ["<U5", "M8[ms]", [("a", "<i2"), ("b", "S3")], ">c16"])
def test_every_plain_dtype_round_trips(name, dtype):
    a = SharedArray.create(name, (3, 2), dtype)
    ref = np.zeros((3, 2), dtype)
    ref.flat[1] = np.array([1]).astype(dtype)[0] if ref.dtype.fields is None else (1, b"x")
    a[...] = ref
    b = SharedArray.attach(name)
    assert b.dtype == np.dtype(dtype) and b.shape == (3, 2)
    assert (b.numpy() == ref).all()
    assert (np.load(a.path) == ref).all()


ATTACHER = """
import sys, mmapkit
print("ready", flush=True)
while True:
    try:
        a = mmapkit.SharedArray.attach(sys.argv[1])
        break
    except FileNotFoundError:
        pass
print(a.shape, int(a[-1]), flush=True)
"""


def test_attach_never_sees_a_segment_being_created(name):
    p = subprocess.Popen(
        [sys.executable, "-c", ATTACHER, name],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert p.stdout.readline().strip() == "ready"
        a = SharedArray.create(name, 64 << 20, "u4")  # 256 MiB: allocating takes a while
        a[-1] = 5  # the attacher may read before this: 0 or 5, never an error
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        assert out.split("\n")[0] in (f"({64 << 20},) 0", f"({64 << 20},) 5")
        a.close()
    finally:
        p.kill()
        p.wait()


def test_attach_refuses_a_bad_npy_file_and_keeps_it(tmp_path):
    """A dtype numpy cannot read used to fail after attaching; the dropped
    handle (unlink_on_close defaults to True) then deleted the user's file."""
    p = tmp_path / "bad.npy"
    d = "{'descr': [('a', '<q9')], 'fortran_order': False, 'shape': (1,), }"
    head = b"\x93NUMPY\x01\x00" + (118).to_bytes(2, "little") + d.encode().ljust(117) + b"\n"
    p.write_bytes(head + bytes(8))
    before = p.read_bytes()
    with pytest.raises(mmapkit.FormatError, match=r"bad\.npy"):
        mmapkit.SharedArray.attach(p)
    import gc

    gc.collect()
    assert p.read_bytes() == before


def test_attach_refuses_a_too_short_structured_segment_and_keeps_it(tmp_path):
    """The size check of a structured dtype runs after attaching: the
    rejected handle must not remove the file (attach turns unlink_on_close
    on only once the segment is accepted)."""
    p = tmp_path / "short.npy"
    d = "{'descr': [('a', '<i8'), ('b', '<i8')], 'fortran_order': False, 'shape': (4,), }"
    head = b"\x93NUMPY\x01\x00" + (118).to_bytes(2, "little") + d.encode().ljust(117) + b"\n"
    p.write_bytes(head + bytes(16))  # one row of four
    before = p.read_bytes()
    with pytest.raises(ValueError, match=r"short\.npy"):
        mmapkit.SharedArray.attach(p)
    import gc

    gc.collect()
    assert p.read_bytes() == before


def test_attach_then_close_still_removes_the_name(name):
    a = SharedArray.create(name, 8, "f8")
    b = SharedArray.attach(name)
    a.close()
    assert os.path.exists(f"/dev/shm/{name}"), "b still holds it"
    b.close()
    assert not os.path.exists(f"/dev/shm/{name}"), "the last holder removes the name"
    c = SharedArray.create(name, 8, "f8", unlink_on_close=False)
    d = SharedArray.attach(name, unlink_on_close=False)
    d.close()
    c.close()
    assert os.path.exists(f"/dev/shm/{name}")
    os.unlink(f"/dev/shm/{name}")


def test_close_with_a_view_unlinks_when_the_view_goes(name):
    a = SharedArray.create(name, 8, "u1")
    v = np.asarray(a)
    a.close()
    assert a.closed and os.path.exists(f"/dev/shm/{name}")
    v[0] = 1  # still mapped
    del v
    assert not os.path.exists(f"/dev/shm/{name}")
