//! Output-kind matrix: every CLI command that writes
//! a file × every kind of thing its output path can be. Each cell asserts
//! the exact outcome: the right bytes at the real target with links still
//! links and mode kept, or exit 2 with a message naming the path and the
//! directory untouched (bytes, inode, mode, link targets), and never a temp
//! file left behind.
//!
//! The read-only directory is a read-only bind mount (as root, chmod 555
//! does not stop writes): EROFS. Skipped, with the reason printed, when the
//! mount is not possible.
#![allow(clippy::disallowed_methods, reason = "integration tests write their fixtures directly")]

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{symlink, FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

mod common;
use common::*;

const FASTA: &[u8] = b">r1\nACGTACGTTTGA\n>r2\nGGGCCCAAATTT\n>r3\nACGTNACGT\n";

/// What a directory holds: per name, (kind, inode, mode, content or link).
fn snapshot(d: &Path) -> BTreeMap<String, (String, u64, u32, Vec<u8>)> {
    let mut m = BTreeMap::new();
    for e in fs::read_dir(d).unwrap() {
        let e = e.unwrap();
        let md = fs::symlink_metadata(e.path()).unwrap();
        let t = md.file_type();
        let (kind, body) = if t.is_symlink() {
            ("link", fs::read_link(e.path()).unwrap().into_os_string().into_encoded_bytes())
        } else if t.is_file() {
            ("file", fs::read(e.path()).unwrap())
        } else if t.is_dir() {
            ("dir", Vec::new())
        } else if t.is_fifo() {
            ("fifo", Vec::new())
        } else {
            ("other", Vec::new())
        };
        m.insert(
            e.file_name().to_string_lossy().into_owned(),
            (kind.to_owned(), md.ino(), md.mode(), body),
        );
    }
    m
}

/// Runs the CLI in `dir`. Afterwards `/dev/stdout` must still be the
/// system's link to `/proc/self/fd/1` (the old code replaced it with a
/// regular file, as root): if it is not, it is put back (this machine is
/// shared) and the cell fails.
fn run(dir: &Path, args: &[&str]) -> Output {
    let out = mmapkit().current_dir(dir).args(args).stdin(Stdio::null()).output().unwrap();
    let dev_stdout = Path::new("/dev/stdout");
    if !fs::symlink_metadata(dev_stdout).is_ok_and(|m| m.file_type().is_symlink()) {
        let _ = fs::remove_file(dev_stdout);
        let _ = symlink("/proc/self/fd/1", dev_stdout);
        panic!("{args:?} replaced /dev/stdout (restored it)");
    }
    out
}

/// The kinds of output path; `setup` builds it in `d` (which holds the
/// input `in.fa`, or `data.txt` for replace) and returns the argument.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    New,
    Regular,
    Symlink,
    Dangling,
    Chain,
    HardLink,
    DevStdout,
    Dash,
    Fifo,
    Dir,
    SameAsInput,
    SameViaSymlink,
    SameViaHardLink,
}

const KINDS: [Kind; 13] = [
    Kind::New,
    Kind::Regular,
    Kind::Symlink,
    Kind::Dangling,
    Kind::Chain,
    Kind::HardLink,
    Kind::DevStdout,
    Kind::Dash,
    Kind::Fifo,
    Kind::Dir,
    Kind::SameAsInput,
    Kind::SameViaSymlink,
    Kind::SameViaHardLink,
];

fn mkfifo(p: &Path) {
    assert!(Command::new("mkfifo").arg(p).status().unwrap().success());
}

/// Builds the output of kind `k` named with extension `ext`; returns the
/// argument and the real file it leads to (if any).
fn setup(d: &Path, k: Kind, ext: &str, input: &str) -> (String, Option<PathBuf>) {
    let real = d.join(format!("real.{ext}"));
    let old = |p: &Path| {
        fs::write(p, b"old contents\n").unwrap();
        fs::set_permissions(p, fs::Permissions::from_mode(0o640)).unwrap();
    };
    let name = |s: &str| format!("{s}.{ext}");
    match k {
        Kind::New => (name("new"), Some(d.join(name("new")))),
        Kind::Regular => {
            old(&real);
            (name("real"), Some(real))
        }
        Kind::Symlink => {
            old(&real);
            symlink(name("real"), d.join(name("link"))).unwrap();
            (name("link"), Some(real))
        }
        Kind::Dangling => {
            symlink(name("real"), d.join(name("link"))).unwrap();
            (name("link"), Some(real))
        }
        Kind::Chain => {
            old(&real);
            symlink(name("real"), d.join(name("l1"))).unwrap();
            symlink(d.join(name("l1")), d.join(name("l2"))).unwrap();
            (name("l2"), Some(real))
        }
        Kind::HardLink => {
            old(&real);
            fs::hard_link(&real, d.join(name("hard"))).unwrap();
            (name("hard"), Some(d.join(name("hard"))))
        }
        Kind::DevStdout => ("/dev/stdout".into(), None),
        Kind::Dash => ("-".into(), None),
        Kind::Fifo => {
            mkfifo(&d.join(name("fifo")));
            (name("fifo"), None)
        }
        Kind::Dir => {
            fs::create_dir(d.join(name("dir"))).unwrap();
            (name("dir"), None)
        }
        Kind::SameAsInput => (input.into(), None),
        Kind::SameViaSymlink => {
            symlink(input, d.join(name("inlink"))).unwrap();
            (name("inlink"), None)
        }
        Kind::SameViaHardLink => {
            fs::hard_link(d.join(input), d.join(name("inhard"))).unwrap();
            (name("inhard"), None)
        }
    }
}

fn assert_refused(
    out: &Output,
    d: &Path,
    before: &BTreeMap<String, (String, u64, u32, Vec<u8>)>,
    names: &str,
    cell: &str,
) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{cell}: expected exit 2, stderr {err}");
    assert!(err.contains(names), "{cell}: the message must name {names:?}: {err}");
    assert_eq!(&snapshot(d), before, "{cell}: the directory changed");
}

/// Checks a written cell: the bytes at the real target, links still links,
/// the old mode kept, no temp file.
fn assert_written(
    out: &Output,
    d: &Path,
    real: &Path,
    arg: &str,
    want: &[u8],
    had_mode: bool,
    cell: &str,
) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{cell}: {err}");
    assert_eq!(fs::read(real).unwrap(), want, "{cell}: content at the real target");
    let argp = d.join(arg);
    if argp != real {
        let t = fs::symlink_metadata(&argp).unwrap().file_type();
        assert!(t.is_symlink() || arg.starts_with("hard"), "{cell}: the link was replaced");
    }
    if had_mode {
        assert_eq!(fs::metadata(real).unwrap().mode() & 0o7777, 0o640, "{cell}: mode not kept");
    }
    assert!(leftovers(d).is_empty(), "{cell}: temp files left: {:?}", leftovers(d));
}

/// Runs every cell, collecting failures, so that a broken build reports
/// the whole matrix (not only its first failing cell).
struct Cells {
    run: usize,
    failed: Vec<String>,
}

impl Cells {
    fn new() -> Cells {
        Cells { run: 0, failed: Vec::new() }
    }

    fn cell(&mut self, f: impl FnOnce()) {
        self.run += 1;
        if let Err(e) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
            let msg = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()));
            self.failed.push(msg.unwrap_or_default());
        }
    }

    fn finish(self, what: &str) {
        eprintln!("{what}: {} cells, {} failed", self.run, self.failed.len());
        assert!(
            self.failed.is_empty(),
            "{what}: {} of {} cells failed:\n{}",
            self.failed.len(),
            self.run,
            self.failed.join("\n")
        );
    }
}

fn reference_kmers(fmt: &str, mode: &str) -> Vec<u8> {
    let d = tempdir();
    fs::write(d.path().join("in.fa"), FASTA).unwrap();
    let o = run(d.path(), &["kmers", "in.fa", "-o", &format!("ref.{fmt}"), "--mode", mode]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    fs::read(d.path().join(format!("ref.{fmt}"))).unwrap()
}

#[test]
fn kmers_output_kind_matrix() {
    let mut cells = Cells::new();
    for (fmt, mode) in
        [("csv", "mmap"), ("csv", "single"), ("csv", "batch"), ("npy", "mmap"), ("npy", "single")]
    {
        let want = reference_kmers(fmt, mode);
        for k in KINDS {
            let want = &want;
            cells.cell(|| {
                let cell = format!("kmers {fmt} --mode {mode} × {k:?}");
                let d = tempdir();
                let d = d.path();
                fs::write(d.join("in.fa"), FASTA).unwrap();
                let (arg, real) = setup(d, k, fmt, "in.fa");
                let had_mode =
                    matches!(k, Kind::Regular | Kind::Symlink | Kind::Chain | Kind::HardLink);
                let before = snapshot(d);
                let out = run(d, &["kmers", "in.fa", "-o", &arg, "--mode", mode, "--format", fmt]);
                match (k, fmt) {
                    (Kind::DevStdout | Kind::Dash, "csv") => {
                        assert_eq!(
                            out.status.code(),
                            Some(0),
                            "{cell}: {}",
                            String::from_utf8_lossy(&out.stderr)
                        );
                        assert_eq!(&out.stdout, want, "{cell}: streamed bytes");
                        assert_eq!(snapshot(d), before, "{cell}: no file may be created");
                    }
                    (Kind::DevStdout | Kind::Dash, _) => {
                        assert_refused(&out, d, &before, "standard output", &cell)
                    }
                    (Kind::Fifo, _) => assert_refused(&out, d, &before, &arg, &cell),
                    (Kind::Dir, _) => assert_refused(&out, d, &before, &arg, &cell),
                    (Kind::SameAsInput | Kind::SameViaSymlink | Kind::SameViaHardLink, _) => {
                        assert_refused(&out, d, &before, &arg, &cell)
                    }
                    _ => {
                        let real = real.unwrap();
                        assert_written(&out, d, &real, &arg, want, had_mode, &cell);
                        if k == Kind::HardLink {
                            // The rename replaces only the name written to (like sed -i).
                            assert_eq!(
                                fs::read(d.join(format!("real.{fmt}"))).unwrap(),
                                b"old contents\n",
                                "{cell}"
                            );
                        }
                    }
                }
            });
        }
    }
    cells.finish("kmers output-kind matrix");
}

#[test]
fn replace_output_kind_matrix() {
    let data = b"alpha beta\nalpha gamma\n".repeat(50);
    let mut cells = Cells::new();
    // (pattern, replacement): a rewrite (lengths differ) and an in-place edit.
    for (from, to) in [("alpha", "ALPHA!"), ("alpha", "OMEGA")] {
        let want = naive_replace(&data, from.as_bytes(), to.as_bytes()).0;
        let in_place = from.len() == to.len();
        for k in KINDS {
            // The file replace edits is its own input; "same as input" is
            // the regular case.
            if matches!(k, Kind::SameAsInput | Kind::SameViaSymlink | Kind::SameViaHardLink) {
                continue;
            }
            let (data, want) = (&data, &want);
            cells.cell(|| {
                let cell = format!("replace {from}->{to} × {k:?}");
                let d = tempdir();
                let d = d.path();
                let (arg, real) = setup(d, k, "txt", "in.txt");
                if let Some(r) = &real {
                    if matches!(k, Kind::Regular | Kind::Symlink | Kind::Chain | Kind::HardLink) {
                        fs::write(r, data).unwrap();
                        if k == Kind::HardLink {
                            // `real.txt` and `hard.txt` are one inode holding `data`.
                            assert_eq!(&fs::read(d.join("real.txt")).unwrap(), data);
                        }
                    }
                }
                let before = snapshot(d);
                let out = run(d, &["replace", "-F", from, to, &arg]);
                match k {
                    Kind::Regular | Kind::Symlink | Kind::Chain | Kind::HardLink => {
                        let real = real.unwrap();
                        assert_written(&out, d, &real, &arg, want, true, &cell);
                        if k == Kind::HardLink {
                            // Rewrite: only this name; in place: the shared inode.
                            let other = fs::read(d.join("real.txt")).unwrap();
                            assert_eq!(
                                &other,
                                if in_place { want } else { data },
                                "{cell}: the other hard link"
                            );
                        }
                    }
                    Kind::New | Kind::Dangling | Kind::Dash => {
                        assert_refused(&out, d, &before, &arg, &cell)
                    }
                    // /dev/stdout is a pipe here: not a file to edit.
                    Kind::DevStdout | Kind::Fifo | Kind::Dir => {
                        assert_refused(&out, d, &before, &arg, &cell)
                    }
                    _ => unreachable!(),
                }
            });
        }
    }
    cells.finish("replace output-kind matrix");
}

#[test]
fn log_init_output_kind_matrix() {
    let mut cells = Cells::new();
    for k in [
        Kind::New,
        Kind::Regular,
        Kind::Symlink,
        Kind::Dangling,
        Kind::Fifo,
        Kind::Dir,
        Kind::DevStdout,
    ] {
        cells.cell(|| {
            let cell = format!("log init × {k:?}");
            let d = tempdir();
            let d = d.path();
            let arg = match k {
                Kind::New => "wal".to_owned(),
                Kind::Dir => {
                    fs::create_dir(d.join("wal")).unwrap();
                    "wal".into()
                }
                Kind::Symlink => {
                    fs::create_dir(d.join("waldir")).unwrap();
                    symlink("waldir", d.join("wal")).unwrap();
                    "wal".into()
                }
                _ => setup(d, k, "log", "in.fa").0,
            };
            let before = snapshot(d);
            let out = run(d, &["log", "init", &arg]);
            match k {
                Kind::New | Kind::Dir | Kind::Symlink => {
                    assert_eq!(
                        out.status.code(),
                        Some(0),
                        "{cell}: {}",
                        String::from_utf8_lossy(&out.stderr)
                    );
                    let st = run(d, &["log", "stat", &arg]);
                    assert_eq!(
                        st.status.code(),
                        Some(0),
                        "{cell}: {}",
                        String::from_utf8_lossy(&st.stderr)
                    );
                    if k == Kind::Symlink {
                        assert!(
                            fs::symlink_metadata(d.join("wal")).unwrap().file_type().is_symlink(),
                            "{cell}"
                        );
                        assert!(
                            fs::read_dir(d.join("waldir")).unwrap().count() > 0,
                            "{cell}: written through the link"
                        );
                    }
                    let seg_dir = d.join(&arg);
                    assert!(leftovers(&seg_dir).is_empty(), "{cell}: {:?}", leftovers(&seg_dir));
                }
                _ => assert_refused(&out, d, &before, &arg, &cell),
            }
        });
    }
    cells.finish("log init output-kind matrix");
}

/// A read-only bind mount of a directory (EROFS even for root); unmounted
/// on drop.
struct ReadOnly {
    mnt: PathBuf,
}

impl ReadOnly {
    fn new(src: &Path, mnt: &Path) -> Option<ReadOnly> {
        fs::create_dir_all(mnt).ok()?;
        let ok = |args: &[&str]| {
            Command::new("mount")
                .args(args)
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        let (s, m) = (src.to_str()?, mnt.to_str()?);
        if !ok(&["--bind", s, m]) {
            return None;
        }
        let ro = ReadOnly { mnt: mnt.to_owned() };
        ok(&["-o", "remount,bind,ro", m]).then_some(ro)
    }
}

impl Drop for ReadOnly {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.mnt).status();
    }
}

#[test]
fn outputs_in_a_read_only_directory_fail_cleanly() {
    let d = tempdir();
    let src = d.path().join("src");
    fs::create_dir(&src).unwrap();
    fs::write(src.join("in.fa"), FASTA).unwrap();
    fs::write(src.join("old.csv"), b"old contents\n").unwrap();
    fs::write(src.join("data.txt"), b"alpha beta\n".repeat(20)).unwrap();
    let Some(ro) = ReadOnly::new(&src, &d.path().join("ro")) else {
        eprintln!("SKIPPED: a read-only bind mount is not possible here (needs root and mount)");
        return;
    };
    let m = ro.mnt.clone();
    let before = snapshot(&m);
    // (command, the file it writes)
    let cases: [(&[&str], &str); 6] = [
        (&["kmers", "in.fa", "-o", "new.csv"], "new.csv"),
        (&["kmers", "in.fa", "-o", "old.csv"], "old.csv"),
        (&["kmers", "in.fa", "-o", "old.npy", "--mode", "single"], "old.npy"),
        (&["replace", "-F", "alpha", "ALPHA!", "data.txt"], "data.txt"),
        (&["replace", "-F", "alpha", "OMEGA", "data.txt"], "data.txt"),
        (&["log", "init", "wal"], "wal"),
    ];
    for (args, target) in cases {
        let out = run(&m, args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("Read-only file system"), "{args:?}: {err}");
        let named = err.contains(ro.mnt.to_str().unwrap()) || err.contains(target);
        assert!(named, "{args:?}: the message must name the directory or file: {err}");
        assert_eq!(snapshot(&m), before, "{args:?}");
    }
    eprintln!("read-only directory: {} cells (read-only bind mount, EROFS)", cases.len());
}

/// `-o /dev/stdout >> f` appends to f as the shell
/// asked (the old code replaced f by rename: its earlier content was lost);
/// `>` still gives just the output, and appending to the input is refused.
#[test]
fn dev_stdout_appended_by_the_shell_appends() {
    let want = reference_kmers("csv", "mmap");
    let d = tempdir();
    let d = d.path();
    fs::write(d.join("in.fa"), FASTA).unwrap();
    let sh = |mode: &str, redirect: &str| {
        let script =
            format!("\"$0\" kmers in.fa -o /dev/stdout --format csv --mode {mode} {redirect}");
        Command::new("sh").current_dir(d).args(["-c", &script, &bin()]).output().unwrap()
    };
    for mode in ["mmap", "single"] {
        fs::write(d.join("log.csv"), b"earlier line\n").unwrap();
        let out = sh(mode, ">> log.csv");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(fs::read(d.join("log.csv")).unwrap(), [&b"earlier line\n"[..], &want].concat());
    }
    fs::write(d.join("log.csv"), b"earlier line\n").unwrap();
    let out = sh("mmap", "> log.csv");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(fs::read(d.join("log.csv")).unwrap(), want);
    let out = sh("mmap", ">> in.fa");
    assert_eq!(out.status.code(), Some(2), "appending to the input must be refused");
    assert_eq!(fs::read(d.join("in.fa")).unwrap(), FASTA);
}
