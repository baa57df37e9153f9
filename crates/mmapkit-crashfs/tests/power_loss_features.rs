//! Power-loss matrices of the Python stores. `mmapkit.FeatureStore`: rows
//! of an `add` that returned survive any crash, rows of one that did not
//! are invisible or whole, the two arrays never disagree on the count a
//! reader sees, and a writer reopening the survivor cuts the leftovers
//! and adds on. `mmapkit.TokenStore`: the same for records of an `extend`
//! (values and offsets, committed by the offsets). The workloads and the
//! checkers are Python (the facades over the core's `store::features` and
//! `ArrayStore`, whose commits this checks); they run with the project's
//! `.venv` (or `MMAPKIT_TEST_PYTHON`), and the matrices are skipped, saying
//! why, where that cannot import mmapkit.
#![allow(clippy::disallowed_methods, reason = "integration tests write their fixtures directly")]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use mmapkit_crashfs::CrashAt;

const ROWS: u64 = 37;
const DIM: u64 = 3;

/// Appends `ADDS` batches of `ROWS` rows; row i is (i, 2i, 3i), label i.
const WORKLOAD: &str = r#"
import sys
import numpy as np
import mmapkit

def say(s):
    print(s, flush=True)

path, adds, rows, dim = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
if sys.argv[5] == "nosync":
    # The negative control: commit counts without syncing the rows (a
    # hook of the core's test-hooks builds, read at each add).
    import os
    os.environ["MMAPKIT_TEST_FEATURES_NO_SYNC"] = "1"
fs = mmapkit.FeatureStore(path, "w", dim=dim)
say("CREATED")
for k in range(adds):
    i = np.arange(k * rows, (k + 1) * rows, dtype=np.float32)
    say(f"TRY {(k + 1) * rows}")
    n = fs.add(i[:, None] * np.arange(1, dim + 1, dtype=np.float32), i)
    say(f"ACK {n}")
fs.close()
say("CLOSED")
"#;

/// The feature store's survivor at `d`: `None` when it holds what it must.
const CHECKER: &str = r#"
import sys
import numpy as np
import mmapkit

def want(n, dim):
    i = np.arange(n, dtype=np.float32)
    return i[:, None] * np.arange(1, dim + 1, dtype=np.float32), i

def check(d, created, acked, tried, rows, dim):
    try:
        r = mmapkit.FeatureStore(d)
    except FileNotFoundError as e:
        # Only before creation finished: "not a FeatureStore (no meta.json)".
        return None if not created else f"created, then gone: {e}"
    with r:
        n = len(r)
        if not (acked <= n <= max(tried, acked)) or n % rows:
            return f"reader sees {n} rows; acknowledged {acked}, tried {tried}"
        X, y = r.get(0, n)
        wx, wy = want(n, dim)
        if not (np.array_equal(X, wx) and np.array_equal(y, wy)):
            return f"the {n} committed rows do not hold what was added"
    with mmapkit.FeatureStore(d, "a") as w:
        if len(w) != n:
            return f"a writer sees {len(w)} rows, a reader {n}"
        i = np.arange(n, n + rows, dtype=np.float32)
        w.add(i[:, None] * np.arange(1, dim + 1, dtype=np.float32), i)
    with mmapkit.FeatureStore(d) as r:
        X, y = r.get(0, len(r))
        wx, wy = want(n + rows, dim)
        if len(r) != n + rows or not (np.array_equal(X, wx) and np.array_equal(y, wy)):
            return f"after the writer's add: {len(r)} rows, or not the rows added"
    for name in ("features.npy", "labels.npy"):
        if np.load(f"{d}/{name}", mmap_mode="r").shape[0] != n + rows:
            return f"{name} disagrees with meta.json after a writer closed"
    return None
"#;

/// The checkers' driver: argv is rows, dim, then (dir, created, acked,
/// tried) per survivor; prints `OK dir` or `BAD dir: why` for each.
const DRIVER: &str = r#"
rows, dim = int(sys.argv[1]), int(sys.argv[2])
a = sys.argv[3:]
for k in range(0, len(a), 4):
    d, created, acked, tried = a[k], a[k + 1] == "1", int(a[k + 2]), int(a[k + 3])
    try:
        why = check(d, created, acked, tried, rows, dim)
    except Exception as e:
        why = f"{type(e).__name__}: {e}"
    print(f"OK {d}" if why is None else f"BAD {d}: {why}", flush=True)
"#;

/// Appends `ADDS` extends of `ROWS` records; record i is `1 + 7i mod 50`
/// copies of i (`nosync`, the negative control: extends that do not sync).
const TOKEN_WORKLOAD: &str = r#"
import sys
import numpy as np
import mmapkit

def say(s):
    print(s, flush=True)

path, adds, rows = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
sync = sys.argv[5] != "nosync"
ts = mmapkit.TokenStore(path, "w", dtype=np.uint16)
say("CREATED")
for k in range(adds):
    recs = [np.full(1 + (7 * i) % 50, i, np.uint16) for i in range(k * rows, (k + 1) * rows)]
    say(f"TRY {(k + 1) * rows}")
    n = ts.extend(recs, sync=sync)
    say(f"ACK {n}")
ts.close()
say("CLOSED")
"#;

/// As `CHECKER`, for the token store's survivors.
const TOKEN_CHECKER: &str = r#"
import sys
import numpy as np
import mmapkit

def rec(i):
    return np.full(1 + (7 * i) % 50, i, np.uint16)

def whole(ts, n):
    if len(ts) != n or ts.offsets[-1] != len(ts.tokens):
        return f"{len(ts)} records, offsets end at {ts.offsets[-1]}, {len(ts.tokens)} values"
    for i in range(n):
        if not np.array_equal(ts[i], rec(i)):
            return f"record {i} does not hold what was appended"
    return None

def check(d, created, acked, tried, rows, _dim):
    try:
        r = mmapkit.TokenStore(d)
    except FileNotFoundError as e:
        return None if not created else f"created, then gone: {e}"
    with r:
        n = len(r)
        if not (acked <= n <= max(tried, acked)) or n % rows:
            return f"reader sees {n} records; acknowledged {acked}, tried {tried}"
        why = whole(r, n)
        if why:
            return why
    with mmapkit.TokenStore(d, "a") as w:
        if len(w) != n:
            return f"a writer sees {len(w)} records, a reader {n}"
        w.extend([rec(i) for i in range(n, n + rows)])
    with mmapkit.TokenStore(d) as r:
        why = whole(r, n + rows)
        if why:
            return f"after the writer's extend: {why}"
    offsets = np.load(f"{d}/offsets.npy")
    if len(offsets) != n + rows + 1 or len(np.load(f"{d}/values.npy")) != offsets[-1]:
        return "numpy reads other counts than the store after a writer closed"
    return None
"#;

/// The project's Python, if it imports mmapkit (else why not).
fn python() -> Result<PathBuf, String> {
    let py = std::env::var_os("MMAPKIT_TEST_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.venv/bin/python"));
    let ok = Command::new(&py).args(["-c", "import mmapkit, numpy"]).output();
    match ok {
        Ok(o) if o.status.success() => Ok(py),
        Ok(o) => Err(format!(
            "{} cannot import mmapkit: {}",
            py.display(),
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => Err(format!("{}: {e} (make develop, or set MMAPKIT_TEST_PYTHON)", py.display())),
    }
}

/// A store's matrix: its workload and checker (Python), its name.
struct Store {
    name: &'static str,
    workload: &'static str,
    checker: &'static str,
}

const FEATURES: Store = Store { name: "feature store", workload: WORKLOAD, checker: CHECKER };
const TOKENS: Store =
    Store { name: "token store", workload: TOKEN_WORKLOAD, checker: TOKEN_CHECKER };

fn matrix(py: &Path, store: &Store, sync: &str) -> (u64, Vec<String>) {
    let adds = if long() { 30 } else { 8 };
    let make = |mnt: &Path| {
        let mut c = Command::new(py);
        c.args([
            "-c",
            store.workload,
            mnt.join("fs").to_str().unwrap(),
            &adds.to_string(),
            &ROWS.to_string(),
            &DIM.to_string(),
            sync,
        ])
        // Survivors are checked "after a reboot" (in case a durable-rows
        // record is consulted: the store's arrays keep none).
        .env("MMAPKIT_TEST_BOOT_ID", "the-boot-before-the-power-loss");
        c
    };
    let setup = |_: &Path| {};
    let total = calibrate(&setup, &make);
    let (points, seeds) = size();
    // Each point starts Python twice: fewer points than the Rust matrices.
    let pts = crash_points(total, points / 3, total);
    let (mut survivors, mut bad) = (0u64, Vec::new());
    for &p in &pts {
        let back = tempfile::tempdir().unwrap();
        let (run, crashed) = crash_run(back.path(), &make, CrashAt::Ops(p));
        assert!(run.crashed || run.status.success(), "point {p}: {}", run.stderr);
        let out = &run.stdout;
        let last = |tag: &str| {
            out.iter().filter_map(|l| l.strip_prefix(tag)?.parse::<u64>().ok()).max().unwrap_or(0)
        };
        let created = out.iter().any(|l| l == "CREATED");
        let (acked, tried) = (last("ACK "), last("TRY "));
        // Every crash mode's survivor in its own directory; one checker run.
        let keep = tempfile::tempdir().unwrap();
        let mut args = vec![ROWS.to_string(), DIM.to_string()];
        let mut names = Vec::new();
        for (k, mode) in modes(p, seeds).into_iter().enumerate() {
            let dest = keep.path().join(k.to_string());
            std::fs::create_dir(&dest).unwrap();
            crashed.materialize(mode, &dest).unwrap();
            survivors += 1;
            let fs = dest.join("fs");
            if !fs.exists() {
                if created {
                    bad.push(format!("crash after op {p} of {total}, {mode:?}: the store is gone after it was created"));
                }
                continue;
            }
            names.push(format!("{mode:?}"));
            args.extend([
                fs.to_str().unwrap().to_owned(),
                u8::from(created).to_string(),
                acked.to_string(),
                tried.to_string(),
            ]);
        }
        let checker = format!("{}{DRIVER}", store.checker);
        let o = Command::new(py).arg("-c").arg(checker).args(&args).output().unwrap();
        let lines: Vec<String> =
            String::from_utf8_lossy(&o.stdout).lines().map(str::to_owned).collect();
        if !o.status.success() || lines.len() != names.len() {
            bad.push(format!(
                "crash after op {p}: the checker failed: {}",
                String::from_utf8_lossy(&o.stderr)
            ));
            continue;
        }
        for (l, mode) in lines.iter().zip(&names) {
            if let Some(why) = l.strip_prefix("BAD ") {
                bad.push(format!("crash after op {p} of {total} (acknowledged {acked}, tried {tried}), {mode}: {why}"));
            }
        }
    }
    println!("{} ({sync}): {} crash points of {total} ops x {} modes: {survivors} survivors, {} violations", store.name, pts.len(), seeds + 1, bad.len());
    (survivors, bad)
}

/// Returns from the calling test, printing why, without the project's Python.
macro_rules! require_python {
    () => {
        match python() {
            Ok(py) => py,
            Err(why) => {
                println!("SKIPPED: {why}");
                eprintln!("SKIPPED: {why}");
                return;
            }
        }
    };
}

fuse_tests! {
    feature_store_keeps_every_acknowledged_add_and_its_arrays_agree => {
        let py = require_python!();
        let (n, bad) = matrix(&py, &FEATURES, "sync");
        assert!(n > 50, "only {n} survivors");
        assert!(bad.is_empty(), "{} violation(s):\n{}", bad.len(), bad.join("\n"));
    };

    /// The negative control: an add that commits its count without
    /// flushing the rows must be caught, or the matrix cannot see a
    /// missing flush.
    negative_control_feature_store_without_flush_is_caught => {
        let py = require_python!();
        let (_, bad) = matrix(&py, &FEATURES, "nosync");
        assert!(!bad.is_empty(), "commits without a flush of the rows were never caught");
        println!("negative control: {} violations, e.g. {}", bad.len(), bad[0]);
    };

    token_store_keeps_every_acknowledged_extend_whole => {
        let py = require_python!();
        let (n, bad) = matrix(&py, &TOKENS, "sync");
        assert!(n > 50, "only {n} survivors");
        assert!(bad.is_empty(), "{} violation(s):\n{}", bad.len(), bad.join("\n"));
    };

    /// The negative control: extends with `sync=False` (acknowledged
    /// before anything is synced) must be caught.
    negative_control_token_store_without_sync_is_caught => {
        let py = require_python!();
        let (_, bad) = matrix(&py, &TOKENS, "nosync");
        assert!(!bad.is_empty(), "acknowledged unsynced extends were never caught");
        println!("negative control: {} violations, e.g. {}", bad.len(), bad[0]);
    };
}
