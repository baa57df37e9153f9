"""The benchmark's shared helpers (bench/harness.py, bench/contenders.py)."""

import json

import pytest

from bench.contenders import Registry, command_contender
from bench.harness import (
    CommandError,
    Size,
    capped,
    fmt_ratio,
    fmt_seconds,
    generated_file,
    labelled,
    primed,
    run_command,
)


@pytest.mark.parametrize(
    ("t", "text"),
    [
        (0, "0"),
        (123.4, "123"),
        (12.34, "12.3"),
        (1.234, "1.23"),
        (0.1234, "0.123"),
        (0.0001234, "0.000123"),
    ],
)
def test_fmt_seconds(t, text):
    assert fmt_seconds(t) == text


@pytest.mark.parametrize(
    ("r", "text"),
    [
        (0, "0.00"),
        (123.4, "123"),
        (12.34, "12.3"),
        (1.234, "1.23"),
        (0.1234, "0.12"),
        (0.01234, "0.012"),
    ],
)
def test_fmt_ratio(r, text):
    assert fmt_ratio(r) == text


def test_repeats_and_warmup_policies():
    big, small = Size("large", 1 << 30), Size("small", 1 << 20)
    at_most = capped(3, labelled("large"), otherwise=5)
    assert [at_most(big, 5), at_most(big, 1), at_most(small, 7), at_most(small, 2)] == [3, 1, 5, 2]
    assert capped(1, labelled("large"))(small, 9) == 9
    assert [primed(labelled("large"))(s) for s in (big, small)] == ["prime", "run"]


def test_generated_file_is_made_once_and_again_when_stale(tmp_path):
    made = []

    def write(tmp):
        made.append(tmp)
        tmp.write_bytes(b"x" * 10)
        return {"lines": 1}

    path = tmp_path / "d" / "data.bin"
    want = {"nbytes": 10, "seed": 1}
    info = generated_file(path, want, write, lambda msg: None, "test data")
    assert info == {"nbytes": 10, "seed": 1, "lines": 1, "bytes": 10}
    assert path.read_bytes() == b"x" * 10
    assert not made[0].exists(), "written under a temporary name, renamed into place"
    generated_file(path, want, write, lambda msg: None, "test data")
    assert len(made) == 1, "reused while the marker matches"
    path.write_bytes(b"short")
    generated_file(path, want, write, lambda msg: None, "test data")
    assert len(made) == 2, "made again when the file's size is not the recorded one"
    generated_file(path, {**want, "seed": 2}, write, lambda msg: None, "test data")
    assert len(made) == 3 and json.loads(path.with_name("data.bin.ok").read_text())["seed"] == 2


def test_run_command_reports_the_failing_command_with_its_stderr():
    out, err, rc = run_command(["sh", "-c", "echo hi; echo oops >&2"], stderr=True)
    assert (out, err, rc) == (b"hi\n", b"oops\n", 0)
    with pytest.raises(
        CommandError, match=r"`sh -c 'echo bad >&2; exit 3'` exited with status 3: bad"
    ):
        run_command(["sh", "-c", "echo bad >&2; exit 3"])


def test_command_contender_runs_and_shows_the_same_argv(tmp_path):
    seen = []
    c = command_contender(
        "tool",
        lambda: "/bin/echo",
        {
            "count": (lambda argv, p: seen.append((argv, p)) or len(argv), ["-c", "", "FILE"]),
            "find": (lambda argv, p: argv, ["NEEDLE", "FILE"]),
        },
        fill=lambda a, p: str(p) if a == "FILE" else ("x y" if a == "NEEDLE" else a),
        commands={"find": "tool NEEDLE < FILE"},
    )
    assert c.commands == {"count": "tool -c '' FILE", "find": "tool NEEDLE < FILE"}
    impls = c.resolve()
    assert impls["count"](tmp_path / "f") == 4
    assert seen == [(["/bin/echo", "-c", "", str(tmp_path / "f")], tmp_path / "f")]
    assert impls["find"](tmp_path / "g") == ["/bin/echo", "x y", str(tmp_path / "g")]


def test_registry_gathers_each_contenders_tasks_in_declaration_order():
    reg = Registry()

    @reg.add("b", "t1", note="B's note")
    def b1(p):
        return 1

    @reg.add("a", "t1", available=lambda: "not here")
    def a1(p):
        return 2

    @reg.add("b", "t2")
    def b2(p):
        return 3

    b, a = reg.contenders()
    assert (b.name, b.note, sorted(b.impls), b.available()) == ("b", "B's note", ["t1", "t2"], None)
    assert (a.name, a.available()) == ("a", "not here")
