//! GNU grep's edge cases: dangling links, directory operands, `-o` with
//! context, `-T` on a redirected stdin, basic and extended regex checks,
//! `GREP_COLORS`, the options scripts use, the "cannot match" shortcut,
//! quiet walks and `-z` anchors (pipes and output errors are in
//! `pipelines.rs`). Each case states
//! GNU grep 3.8's answer (`LC_ALL=C`), and is also compared with GNU grep
//! where it is installed. `MMAPKIT_TEST_BIN=<old build>` shows them
//! failing before.
#![allow(clippy::disallowed_methods, reason = "integration tests write their fixtures directly")]

use std::fs;
use std::path::Path;
use std::process::{Command, Output, Stdio};

mod common;
mod gnu_grep;
use common::tempdir;

/// `mmapkit grep ARGS` and GNU grep's run in `dir`, with `env` set and
/// `stdin` from a file (or empty); asserts mmapkit prints `want` and exits
/// `code`, and matches GNU grep when it is installed.
#[track_caller]
fn case(
    dir: &Path,
    env: &[(&str, &str)],
    args: &[&str],
    stdin: Option<&Path>,
    want: &str,
    code: i32,
) {
    let run = |cmd: &mut Command| -> Output {
        cmd.current_dir(dir)
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        match stdin {
            Some(f) => cmd.stdin(fs::File::open(f).unwrap()),
            None => cmd.stdin(Stdio::null()),
        };
        cmd.output().unwrap()
    };
    let got = run(common::mmapkit().arg("grep").args(args));
    assert_eq!(
        (String::from_utf8_lossy(&got.stdout).into_owned(), got.status.code()),
        (want.to_owned(), Some(code)),
        "mmapkit grep {args:?} (stderr: {})",
        gnu_grep::show(&got.stderr)
    );
    if gnu_grep::available() {
        let want = run(Command::new("grep").env("LC_ALL", "C").args(args));
        gnu_grep::assert_same(&format!("{args:?}"), &got, &want);
    }
}

#[test]
fn a_dangling_link_filtered_out_by_name_is_not_reported() {
    let dir = tempdir();
    let d = dir.path().join("d");
    fs::create_dir(&d).unwrap();
    fs::write(d.join("a.c"), "hello\n").unwrap();
    std::os::unix::fs::symlink("nowhere", d.join("dangling.txt")).unwrap();
    for args in [
        &["-R", "--include=*.c", "hello", "d"][..],
        &["-R", "--exclude=*.txt", "hello", "d"],
        &["-R", "-s", "--include=*.c", "hello", "d"],
    ] {
        case(dir.path(), &[], args, None, "d/a.c:hello\n", 0);
    }
    // A link the filters let through is still an error, as in GNU grep.
    std::os::unix::fs::symlink("nowhere", d.join("dangling.c")).unwrap();
    case(dir.path(), &[], &["-R", "--include=*.c", "hello", "d"], None, "d/a.c:hello\n", 2);
}

#[test]
fn a_directory_operand_without_r_is_a_file_with_no_lines() {
    let dir = tempdir();
    fs::create_dir(dir.path().join("sub")).unwrap();
    fs::write(dir.path().join("f"), "foo\n").unwrap();
    case(dir.path(), &[], &["-c", "foo", "sub", "f"], None, "sub:0\nf:1\n", 2);
    case(dir.path(), &[], &["-L", "foo", "sub", "f"], None, "sub\n", 2);
    case(dir.path(), &[], &["-l", "foo", "sub", "f"], None, "f\n", 2);
    case(dir.path(), &[], &["-c", "-s", "foo", "sub"], None, "0\n", 2);
    case(dir.path(), &[], &["-q", "foo", "sub", "f"], None, "", 0);
}

#[test]
fn o_with_context_under_r_keeps_the_separators() {
    let dir = tempdir();
    let d = dir.path().join("d");
    fs::create_dir(&d).unwrap();
    fs::write(d.join("a"), "foo\nbar\n").unwrap();
    fs::write(d.join("b"), "x\nfoo\ny\n").unwrap();
    // The order of files under -r is the walk's (README): one thread
    // sorted by path, then the same files named in that order for GNU.
    let got = |args: &[&str]| {
        let out = gnu_grep::mmapkit(&[args, &["--sort=path", "d"]].concat(), dir.path());
        String::from_utf8(out.stdout).unwrap()
    };
    assert_eq!(got(&["-r", "-o", "-B", "0", ""]), "--\n");
    assert_eq!(got(&["-r", "-o", "-B", "0", "o*"]), "d/a:oo\n--\nd/b:oo\n");
    fs::write(d.join("c"), "bar\n").unwrap(); // a file whose group prints nothing
    assert_eq!(got(&["-r", "-o", "-v", "-B", "1", "foo"]), "d/a-foo\n--\nd/b-foo\n--\n");
    if gnu_grep::available() {
        for args in
            [&["-o", "-B", "0", ""][..], &["-o", "-v", "-B", "1", "foo"], &["-o", "-B", "0", "o*"]]
        {
            let want = gnu_grep::run(
                Command::new("grep").env("LC_ALL", "C").args(args).args(["d/a", "d/b", "d/c"]),
                dir.path(),
            );
            assert_eq!(got(&[&["-r"], args].concat()).as_bytes(), want.stdout, "{args:?}");
        }
    }
}

#[test]
fn t_aligns_a_redirected_regular_stdin_as_its_file() {
    let dir = tempdir();
    let f = dir.path().join("f");
    fs::write(&f, "abc\nxbx\n").unwrap();
    case(dir.path(), &[], &["-T", "-n", "b"], Some(&f), "1:\tabc\n2:\txbx\n", 0);
    case(dir.path(), &[], &["-T", "-n", "b", "-"], Some(&f), "1:\tabc\n2:\txbx\n", 0);
    let out = gnu_grep::mmapkit(&["-T", "-n", "--strategy", "stream", "b", "f"], dir.path());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "1:\tabc\n2:\txbx\n");
}

/// `mmapkit grep ARGS` refuses the pattern as GNU grep does: nothing on
/// stdout, exit 2, GNU's message (after mmapkit's "invalid regex: ").
#[track_caller]
fn refused(dir: &Path, args: &[&str], message: &str) {
    case(dir, &[], args, None, "", 2);
    let out = gnu_grep::mmapkit(args, dir);
    assert_eq!(common::stderr(&out), format!("mmapkit: invalid regex: {message}\n"), "{args:?}");
}

#[test]
fn basic_and_extended_regex_checks() {
    let dir = tempdir();
    let d = dir.path();
    fs::write(d.join("f"), "ab\n^ab\n{1}\na{1\nxxxx\n$$\n=\n+x\n:\n").unwrap();
    // BRE: only the first `^` anchors; `$$` is a `$` at the end.
    case(d, &[], &["-G", "^^ab", "f"], None, "^ab\n", 0);
    case(d, &[], &["-G", "^^", "f"], None, "^ab\n", 0);
    case(d, &[], &["-G", "b^", "f"], None, "", 1);
    case(d, &[], &["-G", "$$", "f"], None, "$$\n", 0);
    // BRE intervals: `\{,3\}` is `\{0,3\}`; with nothing before, `\{`, `\+`
    // and `\?` are literals.
    case(d, &[], &["-G", "-c", "x\\{,3\\}", "f"], None, "9\n", 0);
    case(d, &[], &["-G", "-o", "x\\{,3\\}", "f"], None, "xxx\nx\nx\n", 0);
    case(d, &[], &["-G", "\\{1\\}", "f"], None, "{1}\n", 0);
    case(d, &[], &["-G", "^\\{1", "f"], None, "{1}\n", 0);
    case(d, &[], &["-G", "\\{", "f"], None, "{1}\na{1\n", 0);
    case(d, &[], &["-G", "q\\|\\+x", "f"], None, "+x\n", 0);
    refused(d, &["-G", "a\\{1", "f"], "Unmatched \\{");
    refused(d, &["-G", "a\\{1a\\}", "f"], "Invalid content of \\{\\}");
    refused(d, &["-G", "x\\{2,1\\}", "f"], "Invalid content of \\{\\}");
    refused(d, &["-G", "x\\{32768\\}", "f"], "Regular expression too big");
    // ERE intervals: `{,3}`; `{` is a literal where no interval starts;
    // one with nothing before it repeats nothing (GNU grep also warns).
    case(d, &[], &["-E", "-o", "x{,3}", "f"], None, "xxx\nx\nx\n", 0);
    case(d, &[], &["-E", "{", "f"], None, "{1}\na{1\n", 0);
    case(d, &[], &["-E", "a{1", "f"], None, "a{1\n", 0);
    case(d, &[], &["-E", "a{1a}", "f"], None, "", 1);
    case(d, &[], &["-E", "-c", "q|{1}", "f"], None, "9\n", 0);
    refused(d, &["-E", "x{2,1}", "f"], "Invalid content of \\{\\}");
    // Bracket expressions, in both dialects.
    for syntax in ["-G", "-E"] {
        case(d, &[], &[syntax, "[[=a=]]", "f"], None, "ab\n^ab\na{1\n", 0);
        case(d, &[], &[syntax, "[[.a.]]", "f"], None, "ab\n^ab\na{1\n", 0);
        case(d, &[], &[syntax, "[[.^.]]", "f"], None, "^ab\n", 0);
        case(d, &[], &[syntax, "-c", "[:a]", "f"], None, "4\n", 0);
        let class = "Invalid character class name";
        for p in ["[[:digt:]]", "[[:ALPHA:]]", "[[:^alpha:]]", "[[:word:]]", "[[::]]"] {
            refused(d, &[syntax, p, "f"], class);
        }
        for p in ["[[.space.]]", "[[.ab.]]", "[[=ab=]]", "[[..]]"] {
            refused(d, &[syntax, p, "f"], "Invalid collation character");
        }
        for p in ["[[:alpha]]", "[[:alpha:]", "[[:]]"] {
            refused(d, &[syntax, p, "f"], "Unmatched [, [^, [:, [., or [=");
        }
        for p in ["[:alpha:]", "[^:space:]"] {
            refused(d, &[syntax, p, "f"], "character class syntax is [[:space:]], not [:space:]");
        }
    }
}

#[test]
fn grep_colors_and_grep_color_are_honoured() {
    let dir = tempdir();
    fs::write(dir.path().join("c1"), "foo bar foo\r\nbaz\n").unwrap();
    fs::write(dir.path().join("c2"), "foo\n").unwrap();
    let c = "--color=always";
    let colors = |v| [("GREP_COLORS", v)];
    case(
        dir.path(),
        &colors("mt=01;32:fn=34:se=33:ne"),
        &[c, "foo", "c2"],
        None,
        "\x1b[01;32mfoo\x1b[m\n",
        0,
    );
    case(
        dir.path(),
        &colors("sl=1:cx=2:rv"),
        &[c, "-v", "-n", "-A1", "baz", "c1"],
        None,
        "\x1b[32m\x1b[K1\x1b[m\x1b[K\x1b[36m\x1b[K:\x1b[m\x1b[K\x1b[2m\x1b[Kfoo bar foo\x1b[m\x1b[K\r\n\
         \x1b[32m\x1b[K2\x1b[m\x1b[K\x1b[36m\x1b[K-\x1b[m\x1b[K\x1b[1m\x1b[K\x1b[01;31m\x1b[Kbaz\x1b[m\x1b[K\n",
        0,
    );
    case(
        dir.path(),
        &colors("ms=:sl=4"),
        &[c, "foo", "c1"],
        None,
        "\x1b[4m\x1b[Kfoo bar foo\x1b[m\x1b[K\r\n",
        0,
    );
    case(
        dir.path(),
        &[("GREP_COLOR", "1;34")],
        &[c, "foo", "c2"],
        None,
        "\x1b[1;34m\x1b[Kfoo\x1b[m\x1b[K\n",
        0,
    );
    let out = common::mmapkit()
        .args(["grep", c, "foo", "c2"])
        .current_dir(dir.path())
        .env("GREP_COLOR", "1;34")
        .output()
        .unwrap();
    assert_eq!(
        common::stderr(&out),
        "mmapkit: warning: GREP_COLOR='1;34' is deprecated; use GREP_COLORS='mt=1;34'\n"
    );
}

#[test]
fn the_options_scripts_use() {
    let dir = tempdir();
    fs::write(dir.path().join("f"), "foo\nbar\n").unwrap();
    let d = dir.path();
    // getopt_long's unique prefixes.
    case(d, &[], &["--coun", "foo", "f"], None, "1\n", 0);
    case(d, &[], &["--only", "fo", "f"], None, "fo\n", 0);
    case(d, &[], &["--after=1", "foo", "f"], None, "foo\nbar\n", 0);
    case(d, &[], &["--after", "1", "foo", "f"], None, "foo\nbar\n", 0);
    case(d, &[], &["--co", "foo", "f"], None, "", 2); // ambiguous
    for when in ["yes", "force", "always"] {
        let arg = format!("--color={when}");
        case(d, &[], &[&arg, "bar", "f"], None, "\x1b[01;31m\x1b[Kbar\x1b[m\x1b[K\n", 0);
    }
    for when in ["no", "none", "never", "tty", "if-tty", "auto"] {
        let arg = format!("--color={when}");
        case(d, &[], &[&arg, "bar", "f"], None, "bar\n", 0);
    }
    case(d, &[], &["-i", "--no-ignore-case", "FOO", "f"], None, "", 1);
    case(d, &[], &["-y", "--no-ignore-case", "FOO", "f"], None, "", 1);
    case(d, &[], &["--no-ignore-case", "-i", "FOO", "f"], None, "foo\n", 0);
    case(d, &[], &["-u", "foo", "f"], None, "foo\n", 0);
    // --exclude-from: one glob a line.
    let t = d.join("t");
    fs::create_dir(&t).unwrap();
    fs::write(t.join("a.txt"), "foo\n").unwrap();
    fs::write(t.join("b.c"), "foo\n").unwrap();
    fs::write(t.join("c.h"), "foo\n").unwrap();
    fs::write(d.join("ex"), "*.txt\n*.h\n").unwrap();
    case(d, &[], &["-r", "--exclude-from=ex", "foo", "t"], None, "t/b.c:foo\n", 0);
    case(d, &[], &["-r", "--exclude-from=missing", "foo", "t"], None, "", 2);
    // -V on grep itself.
    let out = gnu_grep::mmapkit(&["-V"], d);
    assert_eq!(
        (common::stdout(&out), out.status.code()),
        (format!("mmapkit grep {}\n", env!("CARGO_PKG_VERSION")), Some(0))
    );
}

#[test]
fn the_cannot_match_shortcut_opens_no_file() {
    let dir = tempdir();
    fs::write(dir.path().join("f"), "a\n\nb\n").unwrap();
    fs::write(dir.path().join("empty-line"), "\n").unwrap();
    // Nothing can be selected: exit 1 at once, not even the missing file
    // is opened (nor, with -m 0, the pattern compiled).
    for args in [
        &["-c", "-f", "/dev/null", "f", "missing"][..],
        &["-c", "-f", "/dev/null", "-x", "f", "missing"],
        &["-c", "-v", "", "f", "missing"],
        &["-l", "-v", "-F", "", "f", "missing"],
        &["-c", "-v", "-e", "", "-e", "", "f", "missing"],
        &["-c", "-v", "-f", "empty-line", "f", "missing"],
        &["-m0", "-E", "(", "f"],
        &["-r", "-c", "-f", "/dev/null", "."],
    ] {
        case(dir.path(), &[], args, None, "", 1);
    }
    // Something can: -x/-w make `''` select lines, -v without patterns
    // selects every line, -L lists the files.
    for (args, want) in [
        (&["-c", "-v", "-x", "", "f", "missing"][..], "f:2\n"),
        (&["-c", "-v", "-w", "", "f", "missing"], "f:2\n"),
        (&["-c", "-v", "-f", "/dev/null", "f", "missing"], "f:3\n"),
        (&["-c", "-f", "empty-line", "-f", "/dev/null", "f", "missing"], "f:3\n"),
        (&["-c", "-v", "-e", "", "-e", "a", "f", "missing"], "f:0\n"),
        (&["-L", "-v", "", "f", "missing"], "f\n"),
    ] {
        case(dir.path(), &[], args, None, want, 2);
    }
    // -w with -o: GNU's word loop shows only `.` of `.""r`.
    fs::write(dir.path().join("q"), ".\"\"r\n").unwrap();
    case(dir.path(), &[], &["-ow", "-E", "\"\"|[[:punct:]]", "q"], None, ".\n", 0);
}

/// Found by the differential test: under -q a walk on several threads
/// printed the errors of entries GNU never reached (it stops at its first
/// match). The walk's messages now wait: a match drops them (a deliberate
/// difference, in the README: GNU prints those it met first), no match
/// prints them all and exits 2, as GNU.
#[test]
fn quiet_walks_print_messages_only_without_a_match() {
    let dir = tempdir();
    let d = dir.path().join("d");
    fs::create_dir_all(d.join("sub")).unwrap();
    fs::write(d.join("sub/a.txt"), "alpha\n").unwrap();
    std::os::unix::fs::symlink("nowhere", d.join("dangling")).unwrap();
    std::os::unix::fs::symlink("..", d.join("sub/up")).unwrap();
    let run = |pattern: &str| {
        let mut cmd = common::mmapkit();
        cmd.current_dir(dir.path()).args(["grep", "-q", "-R", pattern, "d"]);
        cmd.stdin(Stdio::null()).output().unwrap()
    };
    let found = run("alpha");
    assert_eq!(
        (found.status.code(), &found.stdout[..], &found.stderr[..]),
        (Some(0), &b""[..], &b""[..])
    );
    let missed = run("nomatch");
    assert_eq!(missed.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&missed.stderr);
    assert!(stderr.contains("d/dangling: stat: No such file or directory"), "{stderr}");
    assert!(stderr.contains("d/sub/up: warning: recursive directory loop"), "{stderr}");
}

/// Found by the full differential run: with -z and several patterns, -o
/// and --color anchored `^`/`$` at the newlines inside a record (the span
/// engine kept `\n` as its line end).
#[test]
fn z_anchors_spans_at_records_not_newlines() {
    let dir = tempdir();
    fs::write(dir.path().join("r"), "x\nlater or\0beside: alpha\n\0").unwrap();
    let args = [
        "-z",
        "-o",
        "-b",
        "-E",
        "-e",
        "^later",
        "-e",
        "or",
        "-e",
        "^beside: alpha$",
        "-e",
        "alp.",
        "r",
    ];
    case(dir.path(), &[], &args, None, "8:or\x0019:alph\0", 0);
}
