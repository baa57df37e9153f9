//! End-to-end tests of `mmapkit replace`, `keep-lines` and `head --in-place`.
#![allow(clippy::disallowed_methods, reason = "integration tests write their fixtures directly")]

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use serde_json::Value;

mod common;
use common::*;

#[test]
fn replace_prints_counts_and_exit_status() {
    let dir = tempdir();
    let a = file_in(dir.path(), "a.csv", "x,y,z\n1,2,3\n");
    let b = file_in(dir.path(), "b.csv", "no commas\n");

    let out = run_paths(&["replace", "-F", ",", ";"], &[&a]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "4\n");
    assert_eq!(fs::read_to_string(&a).unwrap(), "x;y;z\n1;2;3\n");

    let out = run_paths(&["replace", "-F", ";", ", "], &[&a, &b]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(stdout(&out), format!("{}:4\n{}:0\n", a.display(), b.display()));
    assert_eq!(fs::read_to_string(&a).unwrap(), "x, y, z\n1, 2, 3\n");

    let out = run_paths(&["replace", "-F", "@", "#"], &[&a, &b]);
    assert_eq!(out.status.code(), Some(1), "nothing replaced");

    // Regex with captures; a plain-literal regex takes the in-place path.
    let out = run_paths(&["replace", "--json", r"(\w), (\w)", "$2|$1"], &[&a]);
    assert_eq!(out.status.code(), Some(0));
    let v: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v[0]["replacements"], 2);
    assert_eq!(v[0]["in_place"], false);
    assert_eq!(fs::read_to_string(&a).unwrap(), "y|x, z\n2|1, 3\n");
    let out = run_paths(&["replace", "--json", "y", "Y"], &[&a]);
    let v: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!((v[0]["replacements"].as_u64(), v[0]["in_place"].as_bool()), (Some(1), Some(true)));
    assert_eq!(fs::read_to_string(&a).unwrap(), "Y|x, z\n2|1, 3\n");

    // Escapes with -F, and in replacements.
    fs::write(&a, "a\r\nb\r\n").unwrap();
    let out = run_paths(&["replace", "-F", r"\r\n", r"\n"], &[&a]);
    assert_eq!(stdout(&out), "2\n");
    assert_eq!(fs::read_to_string(&a).unwrap(), "a\nb\n");
    let out = run_paths(&["replace", "^", r"\t"], &[&a]);
    assert_eq!(stdout(&out), "2\n");
    assert_eq!(fs::read_to_string(&a).unwrap(), "\ta\n\tb\n");
}

#[test]
fn strategies_threads_and_sync_agree() {
    let dir = tempdir();
    let data: String = (0..20_000).map(|i| format!("{i},aa{i},{},x\n", i * 7)).collect();
    let path = dir.path().join("d.csv");
    for (pat, rep) in [(",", ";"), (",", ", "), ("aa", "a")] {
        let want = data.replace(pat, rep);
        for args in [
            &["--strategy", "mmap", "-j", "3"][..],
            &["--strategy", "read", "-j", "1", "--sync"],
            &["--strategy", "auto", "--chunk", "4099"],
        ] {
            fs::write(&path, &data).unwrap();
            let out = run_paths(&[&["replace", "-F"], args, &[pat, rep]].concat(), &[&path]);
            assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
            assert_eq!(stdout(&out).trim(), data.matches(pat).count().to_string());
            assert!(fs::read_to_string(&path).unwrap() == want, "{pat} -> {rep} with {args:?}");
        }
    }
}

#[test]
fn bad_input_is_reported_and_other_files_go_on() {
    let dir = tempdir();
    let good = file_in(dir.path(), "good", "a-b");
    let missing = dir.path().join("missing");

    let out = run_paths(&["replace", "-F", "-", "+"], &[&missing, dir.path(), &good]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains(&format!("{}: open: No such file or directory", missing.display())),
        "{err}"
    );
    assert!(err.contains(&format!("{}: replace: Is a directory", dir.path().display())), "{err}");
    assert_eq!(fs::read_to_string(&good).unwrap(), "a+b", "the good file is still processed");

    let out = run_paths(&["replace", "-F", "", "x"], &[&good]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("the pattern is empty"), "{}", stderr(&out));

    let out = run_paths(&["replace", "a(b", "x"], &[&good, &good]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("invalid regex") && err.contains("unclosed group"), "{err}");
    assert_eq!(err.matches("invalid regex").count(), 1, "said once: {err}");
    assert_eq!(fs::read_to_string(&good).unwrap(), "a+b");

    // Refusals that name their file (a FIFO, a /proc file) are per-file
    // errors too (decided by the error's path field, not its text).
    let fifo = dir.path().join("x: y");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let out = run_paths(&["replace", "-F", "+", "-"], &[&fifo, Path::new("/proc/meminfo"), &good]);
    assert_eq!(out.status.code(), Some(2));
    let want = format!(
        "mmapkit: {}: not a regular file\n\
         mmapkit: /proc/meminfo: a /proc or /sys file cannot be edited in place (replace)\n",
        fifo.display()
    );
    assert_eq!(stderr(&out), want);
    assert_eq!(stdout(&out), format!("{}:1\n", good.display()));
    assert_eq!(fs::read_to_string(&good).unwrap(), "a-b");

    let out = run_paths(&["keep-lines", "1"], &[&missing, dir.path()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("No such file") && stderr(&out).contains("Is a directory"),
        "{}",
        stderr(&out)
    );
}

/// Whether the tests run as root (permission bits do not stop root).
fn is_root() -> bool {
    fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
        .unwrap_or(false)
}

/// mmapkit as an unprivileged user: as nobody when the tests run as root.
fn unprivileged() -> Command {
    let mut cmd = mmapkit();
    if is_root() {
        use std::os::unix::process::CommandExt;
        cmd.uid(65534).gid(65534);
    }
    cmd
}

/// Neither the file nor its directory writable: `sed -i` fails too (it
/// cannot create its temporary file); the file's error is reported.
#[test]
fn read_only_file_in_read_only_directory_is_refused() {
    let dir = tempdir();
    let path = file_in(dir.path(), "ro.txt", "a,b\n");
    fs::set_permissions(&path, fs::Permissions::from_mode(0o444)).unwrap();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o555)).unwrap();
    let restore = || fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    for args in
        [&["replace", "-F", ",", ";"][..], &["replace", "-F", ",", ", "], &["keep-lines", "0"]]
    {
        let out = match unprivileged().args(args).arg(&path).output() {
            Ok(out) => out,
            Err(e) => {
                restore();
                eprintln!("SKIPPED read_only_file_in_read_only_directory_is_refused: cannot run the binary as nobody: {e}");
                return;
            }
        };
        if is_root() && stderr(&out).contains("cannot execute") {
            restore();
            eprintln!("SKIPPED read_only_file_in_read_only_directory_is_refused: nobody cannot execute the binary");
            return;
        }
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains(&format!("{}: open: Permission denied", path.display())),
            "{}",
            stderr(&out)
        );
        assert_eq!(fs::read_to_string(&path).unwrap(), "a,b\n");
        assert!(temp_files(dir.path()).is_empty());
    }
    // A dry run only reads.
    let out = unprivileged().args(["replace", "--dry-run", "-F", ",", ";"]).arg(&path).output();
    restore();
    let out = out.unwrap();
    assert_eq!((out.status.code(), stdout(&out).as_str()), (Some(0), "1\n"), "{}", stderr(&out));
}

/// A `0444` file the user owns, in a directory the
/// user may write, is rewritten as `sed -i` does it (new file, same mode,
/// renamed over it), for a same-length literal (which would otherwise be
/// edited in place) as for a rewrite. As root the test runs the binary as
/// nobody on nobody's files, so the permission bits matter there too.
#[test]
fn read_only_file_is_rewritten_like_sed_i() {
    let dir = tempdir();
    let sub = dir.path().join("mine");
    fs::create_dir(&sub).unwrap();
    let path = file_in(&sub, "ro.txt", "a,b\nc,d\n");
    fs::set_permissions(&path, fs::Permissions::from_mode(0o444)).unwrap();
    if is_root() {
        for p in [&sub, &path] {
            std::os::unix::fs::chown(p, Some(65534), Some(65534)).unwrap();
        }
        // nobody must reach the directory
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    }
    let mut want = "a,b\nc,d\n".to_owned();
    for (args, from, to, n) in [
        (&["replace", "--json", "-F", ",", ";"][..], ",", ";", 2),
        (&["replace", "--json", "-F", ";", " ; "], ";", " ; ", 2),
        (&["replace", "--json", "--backup", ".bak", "[ ]", ""], " ", "", 4),
    ] {
        let ino = fs::metadata(&path).map(|m| std::os::unix::fs::MetadataExt::ino(&m)).unwrap();
        let out = match unprivileged().args(args).arg(&path).output() {
            Ok(out) => out,
            Err(e) => {
                eprintln!("SKIPPED read_only_file_is_rewritten_like_sed_i: cannot run the binary as nobody: {e}");
                return;
            }
        };
        if is_root() && stderr(&out).contains("cannot execute") {
            eprintln!(
                "SKIPPED read_only_file_is_rewritten_like_sed_i: nobody cannot execute the binary"
            );
            return;
        }
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
        let v: Value = serde_json::from_str(&stdout(&out)).unwrap();
        assert_eq!(
            (&v[0]["replacements"], &v[0]["in_place"]),
            (&Value::from(n), &Value::from(false))
        );
        want = want.replace(from, to);
        assert_eq!(fs::read_to_string(&path).unwrap(), want, "{args:?}");
        let meta = fs::metadata(&path).unwrap();
        assert_eq!(meta.permissions().mode() & 0o7777, 0o444, "{args:?}: mode kept");
        assert_ne!(
            std::os::unix::fs::MetadataExt::ino(&meta),
            ino,
            "{args:?}: a new file, as sed -i"
        );
        assert!(temp_files(&sub).is_empty());
    }
    assert_eq!(fs::read_to_string(sub.join("ro.txt.bak")).unwrap(), "a ; b\nc ; d\n");
    // Root itself is not stopped by the bits: the same-length edit is made
    // in place, the mode stays.
    if is_root() {
        let out = run_paths(&["replace", "-F", ";", ":"], &[&path]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        assert_eq!(fs::read_to_string(&path).unwrap(), "a:b\nc:d\n");
        assert_eq!(fs::metadata(&path).unwrap().permissions().mode() & 0o7777, 0o444);
    }
}

#[test]
fn dry_run_and_no_match_leave_mtime_alone() {
    let dir = tempdir();
    let path = file_in(dir.path(), "f.txt", "a,b\nc,d\n");
    let t = old_mtime(&path);
    for args in [
        &["replace", "--dry-run", "-F", ",", ";"][..],
        &["replace", "--dry-run", "-F", ",", ", "],
        &["replace", "--dry-run", "[,]", ";"],
        &["replace", "-F", "@", ";"],
        &["replace", "-F", "@", "@@"],
        &["replace", "--backup", ".bak", "@+", "x"],
        &["keep-lines", "2"],
        &["keep-lines", "5"],
    ] {
        let out = run_paths(args, &[&path]);
        assert!(out.status.code() != Some(2), "{args:?}: {}", stderr(&out));
        assert_eq!(fs::read_to_string(&path).unwrap(), "a,b\nc,d\n");
        assert_eq!(fs::metadata(&path).unwrap().modified().unwrap(), t, "{args:?}");
    }
    let out = run_paths(&["replace", "--dry-run", "-F", ",", ", "], &[&path]);
    assert_eq!((out.status.code(), stdout(&out).as_str()), (Some(0), "2\n"));
    assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1, "no temporary or backup file");
}

#[test]
fn backup_keeps_the_original_bytes() {
    let dir = tempdir();
    let path = dir.path().join("f.txt");
    let bak = dir.path().join("f.txt.orig");
    for rep in [";", " ; "] {
        fs::write(&path, "a,b\n").unwrap();
        let out = run_paths(&["replace", "--backup", ".orig", "-F", ",", rep], &[&path]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        assert_eq!(fs::read_to_string(&bak).unwrap(), "a,b\n");
        assert_eq!(fs::read_to_string(&path).unwrap(), format!("a{rep}b\n"));
    }
}

#[test]
fn keep_lines_and_head_in_place() {
    let dir = tempdir();
    let path = dir.path().join("f.txt");
    for (content, n, want) in [
        ("1\n2\n3\n", "0", ""),
        ("1\n2\n3\n", "1", "1\n"),
        ("1\n2\n3\n", "3", "1\n2\n3\n"),
        ("1\n2\n3\n", "9", "1\n2\n3\n"),
        ("1\n2\n3", "2", "1\n2\n"),
        ("1\n2\n3", "3", "1\n2\n3"),
    ] {
        for cmd in [&["keep-lines", n][..], &["head", "--in-place", "-n", n]] {
            fs::write(&path, content).unwrap();
            let out = run_paths(cmd, &[&path]);
            assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
            assert_eq!(stdout(&out), "", "nothing printed");
            assert_eq!(fs::read_to_string(&path).unwrap(), want, "{content:?} {cmd:?}");
        }
    }
    fs::write(&path, "1\n2\n3\n").unwrap();
    let out = run_paths(&["keep-lines", "--json", "2"], &[&path]);
    let v: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v[0]["old_len"], 6);
    assert_eq!(v[0]["new_len"], 4);
    assert_eq!(v[0]["truncated"], true);

    let out = run_paths(&["head", "-n", "1"], &[&path]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("only --in-place is supported"), "{}", stderr(&out));
    assert_eq!(fs::read_to_string(&path).unwrap(), "1\n2\n");
}

/// SIGKILL the rewrite at moments spread over its run: the file is always
/// exactly the old or exactly the new content.
#[test]
fn killed_rewrite_leaves_old_or_new_file() {
    const ITERATIONS: usize = 20;
    // ~64 MiB of CSV (a block of distinct rows, repeated), and what
    // `,` -> `, ` makes of it.
    let (mut block_old, mut block_new) = (Vec::new(), Vec::new());
    for i in 0..4096u64 {
        let fields = [
            i.to_string(),
            format!("lorem ipsum dolor sit amet consectetur adipiscing elit {}", i % 97),
            format!("{}.{}", i % 1000, i % 7),
            "x".repeat(20 + (i % 61) as usize),
        ];
        block_old.extend_from_slice(fields.join(",").as_bytes());
        block_old.push(b'\n');
        block_new.extend_from_slice(fields.join(", ").as_bytes());
        block_new.push(b'\n');
    }
    let copies = (64 << 20) / block_old.len();
    let (old, new) = (block_old.repeat(copies), block_new.repeat(copies));
    let dir = tempdir();
    let path = dir.path().join("data.csv");
    let run = || {
        mmapkit()
            .args(["replace", "-F", ",", ", "])
            .arg(&path)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    // How long an uninterrupted run takes.
    fs::write(&path, &old).unwrap();
    let t0 = Instant::now();
    assert!(run().wait().unwrap().success());
    let full = t0.elapsed();
    assert!(fs::read(&path).unwrap() == new, "an uninterrupted run gives the new content");

    let mut rng = Rng(0x9e37_79b9_7f4a_7c15
        ^ SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap().as_nanos() as u64);
    let (mut olds, mut news, mut strays) = (0, 0, 0);
    for k in 0..ITERATIONS {
        fs::write(&path, &old).unwrap();
        // Spread over [0, 1.2 × full): slot k, jittered (a run can be
        // slower than the calibration, with earlier writes in flight).
        // Slot 0 kills at once: at least one kill before the rename, however
        // the load changes the run's speed after the calibration.
        let delay = if k == 0 {
            Duration::ZERO
        } else {
            full.mul_f64((k as f64 + rng.unit()) / ITERATIONS as f64 * 1.2)
        };
        let mut child = run();
        std::thread::sleep(delay);
        let _ = child.kill(); // SIGKILL
        let status = child.wait().unwrap();
        let got = fs::read(&path).unwrap();
        if got == old {
            olds += 1;
        } else if got == new {
            news += 1;
        } else {
            panic!(
                "after a kill at {delay:?} ({status}) the file is neither old nor new ({} bytes)",
                got.len()
            );
        }
        for t in temp_files(dir.path()) {
            strays += 1;
            eprintln!(
                "kill at {delay:?} ({status}): left behind {} ({} bytes); removed",
                t.display(),
                fs::metadata(&t).map_or(0, |m| m.len())
            );
            fs::remove_file(&t).unwrap();
        }
    }
    eprintln!("{ITERATIONS} kills over a {full:?} run: {olds} old, {news} new, {strays} temporary files left behind");
    assert!(olds > 0, "no kill landed before the rename");
}
