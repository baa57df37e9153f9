//! Power-loss matrices of the whole-file promises: RecordWriter
//! `finish()` with sync, ArrayStore `flush`, `mmapkit replace --sync`.
#![allow(clippy::disallowed_methods, reason = "integration tests write their fixtures directly")]

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use mmapkit::store::{ArrayStore, StoreOptions};
use mmapkit_crashfs::payload::record;
use mmapkit_crashfs::{require_fuse, CrashAt};

/// Checks a survivor (backing directory, the workload's stdout).
type Check = dyn Fn(&Path, &[String]) -> Result<(), String>;

/// Runs `make` at every crash point of `size()`, checks every survivor
/// with `check(backing, stdout)`, prints the tally and returns the violations.
fn matrix(
    name: &str,
    setup: &dyn Fn(&Path),
    make: &dyn Fn(&Path) -> Command,
    check: &Check,
) -> Vec<String> {
    let (points, seeds) = size();
    let total = calibrate(setup, make);
    let pts = crash_points(total, points, total);
    let (mut survivors, mut acked, mut bad) = (0, 0, Vec::new());
    for &p in &pts {
        let back = tempfile::tempdir().unwrap();
        setup(back.path());
        let (run, crashed) = crash_run(back.path(), make, CrashAt::Ops(p));
        assert!(run.crashed || run.status.success(), "{name}: point {p}: {}", run.stderr);
        acked += usize::from(!run.crashed);
        for mode in modes(p, seeds) {
            crashed.materialize(mode, back.path()).unwrap();
            survivors += 1;
            if let Err(e) = check(back.path(), &run.stdout) {
                bad.push(format!("{name}: crash after op {p} of {total}, {mode:?}: {e}"));
            }
        }
    }
    println!(
        "{name}: {} crash points of {total} ops x {} modes: {survivors} survivors ({acked} runs completed), {} violations",
        pts.len(),
        seeds + 1,
        bad.len()
    );
    bad
}

fn assert_clean(bad: Vec<String>) {
    assert!(bad.is_empty(), "{} violation(s):\n{}", bad.len(), bad.join("\n"));
}

fn said(out: &[String], what: &str) -> bool {
    out.iter().any(|l| l == what)
}

/// Leftover hidden temporary files (allowed after a crash, but counted).
fn temps(dir: &Path) -> usize {
    fs::read_dir(dir)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().starts_with('.'))
        .count()
}

// ----- RecordWriter ---------------------------------------------------------

const WIDTH: usize = 24;

/// Records of the writer workload: 72 KB, or 1.4 MB (many writebacks) when long.
fn n_records() -> u64 {
    if long() {
        60_000
    } else {
        3000
    }
}

fn writer_new() -> Vec<u8> {
    (0..n_records()).flat_map(|i| record(i, WIDTH)).collect()
}

fn writer_matrix(old: Option<&'static [u8]>, sync: bool) -> Vec<String> {
    let setup = move |b: &Path| {
        if let Some(old) = old {
            fs::write(b.join("out.txt"), old).unwrap();
        }
    };
    let make = move |m: &Path| {
        let mode = if sync { "sync" } else { "nosync" };
        workload(&[
            "writer",
            m.join("out.txt").to_str().unwrap(),
            &n_records().to_string(),
            &WIDTH.to_string(),
            mode,
        ])
    };
    let new = writer_new();
    let check = move |b: &Path, out: &[String]| -> Result<(), String> {
        let got = fs::read(b.join("out.txt")).ok();
        let finished = said(out, "FINISHED");
        match (got.as_deref(), finished) {
            (Some(g), _) if g == new => Ok(()),
            (g, true) => Err(format!("finish(sync) returned but the file is {}", describe(g))),
            (g, false) if g == old => Ok(()),
            (g, false) => Err(format!("neither the old nor the new file: {}", describe(g))),
        }
    };
    let name = match (old.is_some(), sync) {
        (_, false) => "writer without sync (negative control)",
        (true, true) => "writer (replacing a file)",
        (false, true) => "writer (new file)",
    };
    matrix(name, &setup, &make, &check)
}

fn describe(g: Option<&[u8]>) -> String {
    match g {
        None => "missing".into(),
        Some(g) => format!(
            "{} bytes starting {:?}",
            g.len(),
            String::from_utf8_lossy(&g[..g.len().min(40)])
        ),
    }
}

fuse_tests! {
    writer_finish_sync_leaves_old_or_complete_file => assert_clean(writer_matrix(Some(b"the old content\n"), true));

    writer_finish_sync_new_file_is_absent_or_complete => assert_clean(writer_matrix(None, true));
}

/// Proves the writer matrix can fail: without sync, `finish` returns
/// before the file is durable.
#[test]
fn negative_control_writer_without_sync_loses_the_finished_file() {
    require_fuse!();
    let bad = writer_matrix(Some(b"the old content\n"), false);
    assert!(bad.iter().any(|b| b.contains("returned but")), "no violation without sync: {bad:?}");
}

// ----- ArrayStore -----------------------------------------------------------

const ROWS: u64 = 100;

fn array_setup(b: &Path) {
    let opts = StoreOptions::default().chunk_bytes(4096);
    let mut st = ArrayStore::create(b.join("a.npy"), "'<u8'", 8, &[], &opts).unwrap();
    let bytes: Vec<u8> = (0..5u64).flat_map(|i| i.to_le_bytes()).collect();
    st.append(&bytes).unwrap();
    st.close().unwrap();
}

/// `len` is at least the last flushed count and flushed rows hold their own
/// index; with `whole_header`, so do all rows the header claims.
fn array_check(b: &Path, out: &[String], whole_header: bool) -> Result<(), String> {
    let flushed = out
        .iter()
        .filter_map(|l| l.strip_prefix("FLUSHED ")?.parse::<u64>().ok())
        .max()
        .unwrap_or(5);
    let st =
        ArrayStore::open(b.join("a.npy"), false, None).map_err(|e| format!("open fails: {e}"))?;
    if st.len() < flushed {
        return Err(format!("{flushed} rows were flushed but the header says {}", st.len()));
    }
    let data = st.data();
    let need = st.len() as usize * 8;
    if data.len() < need {
        return Err(format!(
            "the header claims {} rows, the file holds {} bytes of data",
            st.len(),
            data.len()
        ));
    }
    let upto = if whole_header { need } else { flushed as usize * 8 };
    for (i, row) in data[..upto].chunks(8).enumerate() {
        let v = u64::from_le_bytes(row.try_into().unwrap());
        if v != i as u64 {
            return Err(format!(
                "the header claims {} rows (flushed: {flushed}) but row {i} holds {v}: its data was lost",
                st.len()
            ));
        }
    }
    Ok(())
}

fn array_make(m: &Path) -> Command {
    let appends = if long() { 60 } else { 12 };
    workload(&["array", m.join("a.npy").to_str().unwrap(), &appends.to_string(), &ROWS.to_string()])
}

fuse_tests! {
    array_store_flushed_rows_survive => assert_clean(matrix("array store (flushed rows)", &array_setup, &array_make, &|b, o| array_check(b, o, false)));

    /// The header never counts rows whose data was lost: between flushes it
    /// may reach the disk before the rows, and the durable-rows record (written
    /// by every flush, checked on open in a later boot) cuts it back. This was
    /// a defect found by this matrix (a torn power loss left a header claiming
    /// up to one append's rows beyond the last flush, reading as zeros).
    array_store_header_never_claims_lost_rows => assert_clean(matrix("array store (whole header)", &array_setup, &array_make, &|b, o| array_check(b, o, true)));
}

/// `ArrayStore::create` over an existing store: "the new file appears at
/// path complete (written to a temporary file, synced, renamed)".
#[test]
fn array_store_create_replaces_atomically() {
    require_fuse!();
    let make = |m: &Path| workload(&["array-create", m.join("a.npy").to_str().unwrap()]);
    let check = |b: &Path, out: &[String]| -> Result<(), String> {
        let st = ArrayStore::open(b.join("a.npy"), false, None)
            .map_err(|e| format!("open fails: {e}"))?;
        let rows: Vec<u64> = st.data()[..st.len() as usize * 8]
            .chunks(8)
            .map(|r| u64::from_le_bytes(r.try_into().unwrap()))
            .collect();
        let ok = match (said(out, "CREATED"), said(out, "FLUSHED 3")) {
            (_, true) => rows == [0, 1, 2],
            (true, false) => rows.is_empty() || rows == [0, 1, 2],
            (false, false) => rows == [0, 1, 2, 3, 4] || rows.is_empty(),
        };
        if ok {
            Ok(())
        } else {
            Err(format!("rows {rows:?} after {out:?}"))
        }
    };
    assert_clean(matrix("array store create (replacing)", &array_setup, &make, &check));
}

// ----- mmapkit replace --sync -------------------------------------------------

fn cli() -> PathBuf {
    if let Some(p) = std::env::var_os("MMAPKIT_BIN") {
        return p.into();
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target");
    for p in [root.join("debug/mmapkit"), root.join("release/mmapkit")] {
        if p.exists() {
            return p;
        }
    }
    panic!("no mmapkit binary: run `cargo build -p mmapkit-cli` (or set MMAPKIT_BIN)");
}

fn text() -> String {
    (0..3000).map(|i| format!("line {i}: hello world\n")).collect()
}

fn replace_matrix(name: &str, repl: &'static str, sync: bool) -> Vec<String> {
    let setup = |b: &Path| {
        fs::write(b.join("f.txt"), text()).unwrap();
        fs::set_permissions(b.join("f.txt"), fs::Permissions::from_mode(0o640)).unwrap();
    };
    let make = move |m: &Path| {
        let flag = if sync { "--sync" } else { "" };
        cli_script(
            &cli(),
            r#""$0" replace -F $3 world "$1" "$2" && echo DONE"#,
            &[repl.as_ref(), m.join("f.txt").as_os_str(), flag.as_ref()],
        )
    };
    let (old, new) = (text(), text().replace("world", repl));
    let in_place = repl.len() == "world".len();
    let check = move |b: &Path, out: &[String]| -> Result<(), String> {
        let got = fs::read(b.join("f.txt")).ok();
        let got = got.as_deref();
        if got.is_some() {
            let mode = fs::metadata(b.join("f.txt")).unwrap().permissions().mode() & 0o7777;
            if mode != 0o640 {
                return Err(format!("the file's mode is {mode:o}, not 640"));
            }
        }
        if got == Some(new.as_bytes()) {
            return Ok(());
        }
        if said(out, "DONE") {
            return Err(format!("replace exited 0 but the file is {}", describe(got)));
        }
        if got == Some(old.as_bytes()) {
            return Ok(());
        }
        // In place, an interrupted run may leave some matches replaced
        // (documented; a torn sector may even split one), but every byte
        // is the old or the new one.
        if let (true, Some(g)) = (in_place, got) {
            let (o, n) = (old.as_bytes(), new.as_bytes());
            if g.len() == o.len() && (0..g.len()).all(|i| g[i] == o[i] || g[i] == n[i]) {
                return Ok(());
            }
        }
        Err(format!(
            "neither the old nor the new file ({} temp files left): {}",
            temps(b),
            describe(got)
        ))
    };
    matrix(name, &setup, &make, &check)
}

fuse_tests! {
    replace_sync_rewrite_leaves_old_or_new_file => assert_clean(replace_matrix("replace --sync (rewrite, longer)", "planet!", true));

    replace_sync_in_place_is_durable_on_exit => assert_clean(replace_matrix("replace --sync (in place)", "WORLD", true));

    replace_rewrite_to_shorter_leaves_old_or_new_file => assert_clean(replace_matrix("replace --sync (rewrite, shorter)", "w", true));

    /// "--sync: wait until in-place changes are on disk before exiting
    /// (rewrites always are)": a rewrite is durable without the flag too.
    replace_rewrite_without_sync_flag_is_durable_too => assert_clean(replace_matrix("replace (rewrite, no --sync)", "planet!", false));
}

/// Proves the replace matrix can fail: in place without --sync, the exit
/// comes before the data is durable.
#[test]
fn negative_control_replace_in_place_without_sync_is_not_durable() {
    require_fuse!();
    let bad = replace_matrix("replace (in place, no --sync: negative control)", "WORLD", false);
    assert!(bad.iter().any(|b| b.contains("exited 0 but")), "no violation without --sync: {bad:?}");
}

// ----- mmapkit kmers --sync (RecordWriter / StreamWriter through the CLI) -----

fn fasta() -> String {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut s = String::new();
    for r in 0..400 {
        s.push_str(&format!(">r{r}\n"));
        for _ in 0..120 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            s.push(b"ACGT"[(x % 4) as usize] as char);
        }
        s.push('\n');
    }
    s
}

fn kmers_matrix(mode: &'static str) -> Vec<String> {
    let old = b"old vectors\n";
    let setup = move |b: &Path| {
        fs::write(b.join("in.fa"), fasta()).unwrap();
        fs::write(b.join("out.csv"), old).unwrap();
    };
    let make = move |m: &Path| {
        let script = r#""$0" kmers --sync --mode "$1" -j 2 -o "$3" "$2" && echo DONE"#;
        cli_script(
            &cli(),
            script,
            &[mode.as_ref(), m.join("in.fa").as_os_str(), m.join("out.csv").as_os_str()],
        )
    };
    // The expected output, made on an ordinary file system.
    let want = {
        let d = tempfile::tempdir().unwrap();
        setup(d.path());
        let st = make(d.path()).output().unwrap();
        assert!(st.status.success(), "kmers fails: {}", String::from_utf8_lossy(&st.stderr));
        fs::read(d.path().join("out.csv")).unwrap()
    };
    let check = move |b: &Path, out: &[String]| -> Result<(), String> {
        let got = fs::read(b.join("out.csv")).ok();
        match (got.as_deref(), said(out, "DONE")) {
            (Some(g), _) if g == want => Ok(()),
            (g, true) => Err(format!("kmers --sync exited 0 but OUT is {}", describe(g))),
            (Some(g), false) if g == old => Ok(()),
            (g, false) => Err(format!("OUT is neither old nor new: {}", describe(g))),
        }
    };
    matrix(&format!("kmers --sync --mode {mode}"), &setup, &make, &check)
}

#[test]
fn kmers_sync_output_is_old_or_complete_in_every_mode() {
    require_fuse!();
    let mut bad = Vec::new();
    for mode in ["single", "batch", "mmap"] {
        bad.extend(kmers_matrix(mode));
    }
    assert_clean(bad);
}

/// `replace --sync --backup .bak`: the original is kept as f.txt.bak (a
/// hard link for a rewrite, a synced copy before an in-place edit); once
/// f.txt changed on disk the backup must be there, whole.
fn replace_backup_matrix(name: &str, repl: &'static str) -> Vec<String> {
    let setup = |b: &Path| fs::write(b.join("f.txt"), text()).unwrap();
    let make = move |m: &Path| {
        let mut c = Command::new("sh");
        c.arg("-c")
            .arg(r#""$0" replace -F --sync --backup .bak world "$1" "$2" && echo DONE"#)
            .arg(cli())
            .arg(repl)
            .arg(m.join("f.txt"));
        c
    };
    let (old, new) = (text(), text().replace("world", repl));
    let check = move |b: &Path, out: &[String]| -> Result<(), String> {
        let got = fs::read(b.join("f.txt")).map_err(|e| format!("f.txt: {e}"))?;
        let bak = fs::read(b.join("f.txt.bak")).ok();
        if said(out, "DONE") && got != new.as_bytes() {
            return Err(format!("replace exited 0 but f.txt is {}", describe(Some(&got))));
        }
        if got != old.as_bytes() && bak.as_deref() != Some(old.as_bytes()) {
            return Err(format!("f.txt changed but the backup is {}", describe(bak.as_deref())));
        }
        if bak.as_ref().is_some_and(|b| b != old.as_bytes()) {
            return Err(format!("a damaged backup: {}", describe(bak.as_deref())));
        }
        let (o, n) = (old.as_bytes(), new.as_bytes());
        let in_place = o.len() == n.len() && (0..o.len()).all(|i| got[i] == o[i] || got[i] == n[i]);
        if got == o || got == n || in_place {
            Ok(())
        } else {
            Err(format!("f.txt is neither old nor new: {}", describe(Some(&got))))
        }
    };
    matrix(name, &setup, &make, &check)
}

#[test]
fn replace_sync_backup_is_there_whenever_the_file_changed() {
    require_fuse!();
    let mut bad = replace_backup_matrix("replace --sync --backup (rewrite)", "planet!");
    bad.extend(replace_backup_matrix("replace --sync --backup (in place)", "WORLD"));
    assert_clean(bad);
}
