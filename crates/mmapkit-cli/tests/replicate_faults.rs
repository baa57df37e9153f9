//! Seeded fault test of `mmapkit log serve` / `mmapkit log follow` as real
//! processes.
//!
//! The test process is the **writer** (a thread of it): it appends random
//! batches to a log `A` (64 KiB segments, so batches roll over segments
//! all the time; one batch in three synced: the server serves synced
//! entries), truncates it after a recent index with a new term now
//! and then, replaces the directory twice (`rename(A, A.old-K)` and a new
//! log at `A`) and deletes and re-creates it once (more often in longer
//! runs). One **server** process serves `A` read-only throughout
//! (SIGKILLed and restarted on the same port 3 times, or every 20 s; any
//! other death is a failure). Three continuous **followers** are
//! SIGKILLed at random moments (some within 10 ms of their start; now and
//! then a SIGTERM instead, which must stop them cleanly) and restarted;
//! one that exits on its own because the directory now holds another log
//! is restarted with `--reset`, the documented way. Any other exit of its
//! own is a failure.
//!
//! After every kill the follower's directory must pass `mmapkit log
//! verify`, and what it holds must be a prefix of the writer's log *as it
//! was at some moment*: every entry one the writer wrote at that index of
//! the log `DIR/follows` names (term and CRC), and no entry kept past a
//! truncation that cut an entry written before it (each payload names the
//! log, index, term and the writer's step that wrote it, and the test
//! keeps, per entry, the step that cut it). At the end every follower
//! catches up with `--once` (with `--reset` if it says the log was
//! replaced) and must equal `A` entry by entry. `MMAPKIT_FAULT_DIR=PATH`
//! keeps the directories and the processes' output there. The counts are
//! printed at the end (`-- --nocapture`).
//!
//! `MMAPKIT_FAULT_SEED` picks the writer's and the faults' random choices
//! (printed, with every fault, so a failure can be replayed; the processes'
//! timing still varies), `MMAPKIT_FAULT_SECONDS` the length of the fault
//! phase (default 60 s; the whole test takes about 65 s on 2 cores).
#![allow(clippy::disallowed_methods, reason = "integration tests write their fixtures directly")]

mod common;

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use common::Rng;
use mmapkit::log::{entry_crc, CommitLog, LogOptions, SyncMode};

const DEFAULT_SEED: u64 = 0x22_fa17_5eed;
const DEFAULT_SECONDS: u64 = 60;
const FOLLOWERS: usize = 3;

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    let v = v.trim();
    let n = if let Some(h) = v.strip_prefix("0x") { u64::from_str_radix(h, 16) } else { v.parse() };
    Some(n.unwrap_or_else(|_| panic!("{name}={v:?} is not a number")))
}

/// Elapsed time, for the event log.
struct Clock(Instant);

impl Clock {
    fn t(&self) -> String {
        format!("{:8.3}s", self.0.elapsed().as_secs_f64())
    }
}

// ---------------------------------------------------------------- the model

/// One entry the writer appended.
struct Rec {
    term: u64,
    crc: u32,
    /// The writer's step that cut it (`u64::MAX`: never cut).
    cut: u64,
}

/// What the writer did, for every log it made (a "generation": the log a
/// directory replacement or re-creation starts is the next one).
#[derive(Default)]
struct Model {
    /// Log id -> generation.
    gens: HashMap<String, u64>,
    /// (generation, index, step that wrote it) -> the entry.
    recs: HashMap<(u64, u64, u64), Rec>,
    /// The current generation's live entries: the step that wrote entry `k + 1`.
    live: Vec<u64>,
    gen: u64,
    term: u64,
    step: u64,
}

/// The payload names what it is; the rest is filler.
fn payload(rng: &mut Rng, gen: u64, index: u64, term: u64, step: u64) -> Vec<u8> {
    let mut p = format!("g{gen}:i{index}:t{term}:s{step};").into_bytes();
    let r = rng.below(100);
    let extra = if r < 90 {
        rng.below(300)
    } else if r < 99 {
        300 + rng.below(3000)
    } else {
        16_000 + rng.below(16_000) // larger than the server's 16 KiB borrow threshold
    } as usize;
    let b = (rng.next() & 0xff) as u8;
    p.extend((0..extra).map(|k| b.wrapping_add((k as u8).wrapping_mul(31))));
    p
}

/// (generation, index, term, step) from a payload.
fn parse_payload(p: &[u8]) -> Option<(u64, u64, u64, u64)> {
    let end = p.iter().position(|&b| b == b';')?;
    let s = std::str::from_utf8(&p[..end]).ok()?;
    let mut it = s.split(':');
    let mut f = |c: char| it.next()?.strip_prefix(c)?.parse::<u64>().ok();
    Some((f('g')?, f('i')?, f('t')?, f('s')?))
}

// --------------------------------------------------------------- processes

/// Kills the child (SIGKILL) and reaps it when dropped, panics included.
struct Proc(Option<Child>);

impl Proc {
    fn child(&mut self) -> &mut Child {
        self.0.as_mut().expect("running")
    }
    fn kill(&mut self) -> Option<ExitStatus> {
        let mut c = self.0.take()?;
        let _ = c.kill();
        c.wait().ok()
    }
    /// `Some(status)` (and no longer running) if it exited.
    fn exited(&mut self) -> Option<ExitStatus> {
        let st = self.0.as_mut()?.try_wait().expect("try_wait")?;
        self.0 = None;
        Some(st)
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Runs the command to completion within `within` (else kills it and
/// fails); exit status and stderr (stdout goes to stderr too).
fn run_for(cmd: &mut std::process::Command, within: Duration, log: &Path) -> (ExitStatus, String) {
    let out = File::create(log).unwrap();
    let mut p = Proc(Some(
        cmd.stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("spawn mmapkit"),
    ));
    let t = Instant::now();
    let st = loop {
        if let Some(st) = p.exited() {
            break st;
        }
        if t.elapsed() > within {
            p.kill();
            panic!(
                "{cmd:?} did not finish within {within:?}: {}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    (st, std::fs::read_to_string(log).unwrap_or_default())
}

/// SIGTERM, then its exit within 60 s (else SIGKILL and a panic).
fn terminate(p: &mut Proc) -> ExitStatus {
    let pid = p.child().id() as i32;
    // SAFETY: kill(2) on our own child, not reaped yet (exited() reaps).
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let t = Instant::now();
    loop {
        if let Some(st) = p.exited() {
            return st;
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "pid {pid} did not stop within 60 s of SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

struct Server {
    proc: Proc,
    url: String,
    port: u16,
    stderr: PathBuf,
    starts: u32,
}

fn start_server(
    dir: &Path,
    port: u16,
    logs: &Path,
    starts: u32,
) -> Option<(Proc, String, u16, PathBuf)> {
    let stderr = logs.join(format!("serve-{starts}.stderr"));
    let mut child = common::mmapkit()
        .args(["log", "serve"])
        .arg(dir)
        .args(["--bind", &format!("127.0.0.1:{port}")])
        // Small pages: more requests, so more of them race the writer.
        .args(["--max-page-count", "300", "--max-page-bytes", "200000"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(File::create(&stderr).unwrap())
        .spawn()
        .expect("spawn mmapkit log serve");
    let out = child.stdout.take().unwrap();
    let mut p = Proc(Some(child));
    let mut line = String::new();
    BufReader::new(out).read_line(&mut line).unwrap();
    let url = line.trim().to_string();
    if !url.starts_with("http://127.0.0.1:") {
        p.kill();
        return None;
    }
    let port = url.rsplit(':').next().unwrap().parse().unwrap();
    Some((p, url, port, stderr))
}

impl Server {
    fn start(dir: &Path, logs: &Path) -> Server {
        let (proc, url, port, stderr) =
            start_server(dir, 0, logs, 0).expect("the server did not start");
        Server { proc, url, port, stderr, starts: 1 }
    }
    /// Starts it again on the same port (retried while the port is busy).
    fn restart(&mut self, dir: &Path, logs: &Path) {
        let t = Instant::now();
        loop {
            if let Some((proc, url, _, stderr)) = start_server(dir, self.port, logs, self.starts) {
                assert_eq!(url, self.url);
                (self.proc, self.stderr) = (proc, stderr);
                self.starts += 1;
                return;
            }
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "the server could not listen on port {} again: {}",
                self.port,
                std::fs::read_to_string(logs.join(format!("serve-{}.stderr", self.starts)))
                    .unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

struct Follower {
    k: usize,
    dir: PathBuf,
    sync: &'static str,
    proc: Proc,
    kill_at: Instant,
    stderr: PathBuf,
    spawns: u32,
    /// The next start passes `--reset`.
    reset: bool,
    /// This start is killed within 10 ms.
    early: bool,
    started: Instant,
}

// --------------------------------------------------------------- the checks

fn open_ro(dir: &Path) -> Result<CommitLog, String> {
    CommitLog::open(dir, LogOptions::default().read_only(true))
        .map_err(|e| format!("{}: cannot open: {e}", dir.display()))
}

/// The log id `DIR/follows` records.
fn follows_id(dir: &Path) -> Result<Option<String>, String> {
    match std::fs::read(dir.join("follows")) {
        Ok(b) => {
            let v: serde_json::Value = serde_json::from_slice(&b).map_err(|e| {
                format!(
                    "{}/follows is not JSON ({e}): {:?}",
                    dir.display(),
                    String::from_utf8_lossy(&b)
                )
            })?;
            Ok(Some(v["log_id"].as_str().ok_or("follows has no log_id")?.to_string()))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("{}/follows: {e}", dir.display())),
    }
}

/// What a follower holds, checked against the model: `mmapkit log verify`
/// passes, and its entries are a prefix of the writer's log of the
/// generation `DIR/follows` names, as it was at some step. A summary.
fn check_copy(dir: &Path, model: &Mutex<Model>, logs: &Path) -> Result<String, String> {
    if !dir.exists() {
        return Ok("no directory yet".into());
    }
    let (st, text) = run_for(
        common::mmapkit().args(["log", "verify"]).arg(dir),
        Duration::from_secs(120),
        &logs.join("verify.out"),
    );
    // A follower killed in the middle of an append (with --sync never) may
    // leave a last batch that does not read back: verify reports it (exit 1)
    // and the next writable open moves it to the quarantine; anything else
    // is a failure.
    let torn = st.code() == Some(1) && text.contains("the last batch is unreadable");
    if !st.success() && !torn {
        return Err(format!("mmapkit log verify {} failed ({st}): {text}", dir.display()));
    }
    let log = open_ro(dir)?;
    let (first, last) = (log.first_index(), log.last_index());
    if last < first {
        return Ok("empty".into());
    }
    // Everything the follower can have been served is in the model now.
    let m = lock(model);
    let id = follows_id(dir)?.ok_or_else(|| {
        format!("{} holds entries {first}..={last} but no follows record", dir.display())
    })?;
    let gen = *m.gens.get(&id).ok_or_else(|| {
        format!("{}/follows names log {id}, which the writer never made", dir.display())
    })?;
    if first != 1 {
        return Err(format!("{} starts at entry {first}, not 1", dir.display()));
    }
    // The latest write it holds, and the earliest cut of anything it holds.
    let (mut max_write, mut min_cut) = ((0u64, 0u64), (u64::MAX, 0u64));
    let mut i = first;
    while i <= last {
        let hi = (i + 4096).min(last + 1);
        let es =
            log.read(i, hi, None).map_err(|e| format!("{}: read {i}..{hi}: {e}", dir.display()))?;
        for e in es.iter() {
            let idx = e.index();
            let bad = |what: String| {
                Err(format!("{}: entry {idx} (term {}): {what}", dir.display(), e.term()))
            };
            let Some((g, pi, pt, step)) = parse_payload(e.data()) else {
                return bad(format!(
                    "payload is not the writer's: {:?}",
                    String::from_utf8_lossy(&e.data()[..e.data().len().min(60)])
                ));
            };
            if (g, pi, pt) != (gen, idx, e.term()) {
                return bad(format!(
                    "payload says generation {g}, index {pi}, term {pt} but it is entry {idx} with term {} of a copy of generation {gen}",
                    e.term()
                ));
            }
            if e.crc() != entry_crc(idx, e.term(), e.data()) {
                return bad("its CRC does not match its bytes".into());
            }
            let Some(r) = m.recs.get(&(g, idx, step)) else {
                return bad(format!("the writer never wrote it (generation {g}, step {step})"));
            };
            if (r.term, r.crc) != (e.term(), e.crc()) {
                return bad(format!(
                    "differs from what the writer wrote at step {step}: term {} CRC {:#x}",
                    r.term, r.crc
                ));
            }
            if step > max_write.0 {
                max_write = (step, idx);
            }
            if r.cut < min_cut.0 {
                min_cut = (r.cut, idx);
            }
        }
        i = hi;
    }
    if max_write.0 >= min_cut.0 {
        return Err(format!(
            "{}: silent divergence: it holds entry {} as written at step {} but also entry {} that the writer's \
             step {} cut (truncated) before that: no moment of the leader's log had both",
            dir.display(),
            max_write.1,
            max_write.0,
            min_cut.1,
            min_cut.0
        ));
    }
    Ok(format!("ok: 1..={last} of generation {gen}"))
}

/// `b` equals the leader `a` entry by entry.
fn compare(a: &Path, b: &Path) -> Result<(), String> {
    let (x, y) = (open_ro(a)?, open_ro(b)?);
    let (rx, ry) = ((x.first_index(), x.last_index()), (y.first_index(), y.last_index()));
    if rx != ry {
        return Err(format!(
            "{} holds {}..={} but the leader {}..={}",
            b.display(),
            ry.0,
            ry.1,
            rx.0,
            rx.1
        ));
    }
    if x.identity().id.as_deref().map(str::to_owned) != follows_id(b)? {
        return Err(format!(
            "{} follows {:?}, the leader is {:?}",
            b.display(),
            follows_id(b)?,
            x.identity().id
        ));
    }
    let mut i = rx.0;
    while i <= rx.1 {
        let hi = (i + 4096).min(rx.1 + 1);
        let (ex, ey) = (
            x.read(i, hi, None).map_err(|e| e.to_string())?,
            y.read(i, hi, None).map_err(|e| e.to_string())?,
        );
        for (p, q) in ex.iter().zip(ey.iter()) {
            if (p.index(), p.term(), p.crc(), p.data()) != (q.index(), q.term(), q.crc(), q.data())
            {
                return Err(format!(
                    "{}: entry {} has term {} and {} bytes, the leader's term {} and {} bytes",
                    b.display(),
                    q.index(),
                    q.term(),
                    q.data().len(),
                    p.term(),
                    p.data().len()
                ));
            }
        }
        i = hi;
    }
    Ok(())
}

/// A follower's message says the leader serves another log than it
/// copies: (the leader's id, the follower's).
fn other_log(text: &str) -> Option<(String, String)> {
    let a = text.split("the leader serves log ").nth(1)?;
    let b = a.split("this follower copies log ").nth(1)?;
    let id = |s: &str| s.chars().take_while(|c| c.is_ascii_hexdigit()).collect::<String>();
    Some((id(a), id(b)))
}

/// A short name for an error message, for the counts.
fn kind(text: &str) -> String {
    let line = text
        .lines()
        .rev()
        .find(|l| l.contains("mmapkit:") || l.contains("error"))
        .unwrap_or(text.trim());
    let line: String = line.chars().filter(|c| !c.is_ascii_digit()).collect();
    line.chars().take(120).collect()
}

// ----------------------------------------------------------------- the test

#[derive(Default, Debug)]
struct Counts {
    entries_appended: u64,
    batches: u64,
    truncations: u64,
    entries_truncated: u64,
    term_bumps: u64,
    dir_replacements: u64,
    dir_recreations: u64,
    follower_kills: u64,
    follower_early_kills: u64,
    follower_sigterms: u64,
    follower_starts: u64,
    follower_exits_other_log: u64,
    resets: u64,
    checks: u64,
    server_kills: u64,
    server_restarts: u64,
    follows_once: u64,
    errors: BTreeMap<String, u64>,
}

/// `n` moments spread over the run (fractions of it, one in each of `n`
/// equal parts, away from both ends), latest first (taken with `pop`).
fn moments(rng: &mut Rng, n: u64) -> Vec<f64> {
    (0..n).rev().map(|k| 0.05 + 0.9 * (k as f64 + 0.2 + 0.6 * rng.unit()) / n as f64).collect()
}

/// Sets the flag when dropped (on a panic too).
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

fn lock(m: &Mutex<Model>) -> MutexGuard<'_, Model> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The writer, on a thread of its own until `deadline`: appends, truncates,
/// replaces and re-creates `a`. The model is updated under its lock
/// together with the log, so a check that holds the lock knows every entry
/// a follower can have been served.
fn write(
    a: &Path,
    base: &Path,
    seed: u64,
    deadline: Duration,
    model: &Mutex<Model>,
    clock: &Clock,
    stop: &AtomicBool,
) -> Counts {
    let mut rng = Rng((seed ^ 0x9e37_79b9_7f4a_7c15).max(1));
    let mut c = Counts::default();
    let wopts = LogOptions::default().segment_size(64 << 10).sync(SyncMode::Never);
    let new_log = |m: &mut Model| -> CommitLog {
        let w = CommitLog::open(a, wopts.clone()).expect("create the writer's log");
        assert_eq!(w.last_index(), 0, "a new log");
        m.gen += 1;
        m.term += 1;
        m.live.clear();
        m.gens.insert(w.identity().id.expect("a new log has an id").to_string(), m.gen);
        w
    };
    let mut writer = Some(new_log(&mut lock(model)));
    // When the directory is replaced (renamed away, a new log in its
    // place: twice, or every 30 s of a longer run) and when it is deleted
    // and re-created (once, or every 90 s), as fractions of the run.
    let mut replace_at = moments(&mut rng, (deadline.as_secs() / 30).max(2));
    let mut recreate_at = moments(&mut rng, (deadline.as_secs() / 90).max(1));
    let start = Instant::now();
    while start.elapsed() < deadline && !stop.load(Ordering::Relaxed) {
        let frac = start.elapsed().as_secs_f64() / deadline.as_secs_f64();
        let mut m = lock(model);
        m.step += 1;
        let step = m.step;
        if replace_at.last().is_some_and(|&f| frac >= f) {
            replace_at.pop();
            drop(writer.take());
            c.dir_replacements += 1;
            let old = base.join(format!("A.old-{}", c.dir_replacements));
            std::fs::rename(a, &old).unwrap();
            writer = Some(new_log(&mut m));
            eprintln!(
                "{} step {step}: replaced A (renamed to {}) by generation {} (term {})",
                clock.t(),
                old.display(),
                m.gen,
                m.term
            );
        } else if recreate_at.last().is_some_and(|&f| frac >= f) {
            recreate_at.pop();
            drop(writer.take());
            c.dir_recreations += 1;
            std::fs::remove_dir_all(a).unwrap();
            // A moment without a directory: the server must cope.
            std::thread::sleep(Duration::from_millis(rng.below(200)));
            writer = Some(new_log(&mut m));
            eprintln!(
                "{} step {step}: deleted and re-created A: generation {} (term {})",
                clock.t(),
                m.gen,
                m.term
            );
        } else {
            let w = writer.as_ref().unwrap();
            let last = w.last_index();
            let r = rng.below(100);
            if r < 5 && last > 0 {
                let after = last - 1 - rng.below(last.min(60));
                w.truncate_after(after).unwrap();
                let gen = m.gen;
                for idx in after + 1..=last {
                    let s = m.live[idx as usize - 1];
                    m.recs.get_mut(&(gen, idx, s)).unwrap().cut = step;
                }
                m.live.truncate(after as usize);
                m.term += 1;
                c.truncations += 1;
                c.entries_truncated += last - after;
                eprintln!(
                    "{} step {step}: truncated after {after} (was {last}); term now {}",
                    clock.t(),
                    m.term
                );
            } else {
                if r == 5 {
                    m.term += 1;
                    c.term_bumps += 1;
                }
                let n = if rng.below(20) == 0 { 50 + rng.below(150) } else { 1 + rng.below(16) };
                let (gen, term) = (m.gen, m.term);
                let batch: Vec<(u64, Vec<u8>)> = (0..n)
                    .map(|k| (term, payload(&mut rng, gen, last + 1 + k, term, step)))
                    .collect();
                w.append(&batch).unwrap();
                // The server serves synced entries only: one batch in
                // three is synced (the rest is served as segments fill).
                if rng.below(3) == 0 {
                    w.sync().unwrap();
                }
                for (k, (t, p)) in batch.iter().enumerate() {
                    let idx = last + 1 + k as u64;
                    m.recs.insert(
                        (gen, idx, step),
                        Rec { term: *t, crc: entry_crc(idx, *t, p), cut: u64::MAX },
                    );
                    m.live.push(step);
                }
                c.entries_appended += n;
                c.batches += 1;
            }
        }
        drop(m);
        std::thread::sleep(Duration::from_millis(1 + rng.below(12)));
    }
    let w = writer.take().unwrap();
    assert_eq!(w.last_index(), lock(model).live.len() as u64);
    // All of it served for the final catch-up.
    w.sync().unwrap();
    c
}

#[test]
fn serve_follow_seeded_faults() {
    let seed = env_u64("MMAPKIT_FAULT_SEED").unwrap_or(DEFAULT_SEED);
    let secs = env_u64("MMAPKIT_FAULT_SECONDS").unwrap_or(DEFAULT_SECONDS);
    eprintln!("replicate_faults: seed {seed:#x}, {secs} s of faults (replay: MMAPKIT_FAULT_SEED={seed:#x} MMAPKIT_FAULT_SECONDS={secs})");
    // The faults' random stream (the writer has its own).
    let mut rng = Rng((seed ^ 0x5851_f42d_4c95_7f2d).max(1));
    let clock = Clock(Instant::now());
    // MMAPKIT_FAULT_DIR=PATH: work there (a new directory, kept) for a
    // look at the logs after a failure.
    let tmp = common::tempdir();
    let base = match std::env::var_os("MMAPKIT_FAULT_DIR") {
        Some(d) => {
            std::fs::create_dir(&d).expect("MMAPKIT_FAULT_DIR must name a new directory");
            PathBuf::from(d)
        }
        None => tmp.path().to_owned(),
    };
    let a = base.join("A");
    let logs = base.join("logs");
    std::fs::create_dir(&logs).unwrap();
    let mut c = Counts::default();
    let model = Mutex::new(Model::default());
    let mut failures: Vec<String> = Vec::new();
    let deadline = Duration::from_secs(secs);

    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let writer = std::thread::Builder::new()
            .name("writer".into())
            .spawn_scoped(scope, || write(&a, &base, seed, deadline, &model, &clock, &stop))
            .unwrap();
        // A failure stops the writer at once (the scope waits for it).
        let _stop = StopOnDrop(&stop);
        let t = Instant::now();
        while lock(&model).gen == 0 {
            assert!(
                t.elapsed() < Duration::from_secs(60) && !writer.is_finished(),
                "the writer did not start"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        let mut srv = Server::start(&a, &logs);
        eprintln!("{} server at {} (pid {})", clock.t(), srv.url, srv.proc.child().id());

        let spawn = |f: &mut Follower, url: &str, rng: &mut Rng, c: &mut Counts| {
            f.spawns += 1;
            f.stderr = logs.join(format!("follow-{}-{}.stderr", f.k, f.spawns));
            let mut cmd = common::mmapkit();
            cmd.args(["log", "follow", url]).arg(&f.dir).args(["--sync", f.sync]);
            if f.reset {
                cmd.arg("--reset");
                c.resets += 1;
            }
            let child = cmd
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(File::create(&f.stderr).unwrap())
                .spawn()
                .expect("spawn mmapkit log follow");
            let early = rng.below(100) < 15;
            let after = if early {
                Duration::from_micros(rng.below(10_000))
            } else {
                Duration::from_millis(30 + rng.below(2500))
            };
            eprintln!(
                "{} F{} start #{} (pid {}){}; kill after {after:?}",
                clock.t(),
                f.k,
                f.spawns,
                child.id(),
                if f.reset { " --reset" } else { "" }
            );
            f.reset = false;
            f.early = early;
            f.started = Instant::now();
            f.proc = Proc(Some(child));
            f.kill_at = Instant::now() + after;
            c.follower_starts += 1;
            if early {
                std::thread::sleep(after);
            }
        };
        let mut fols: Vec<Follower> = (0..FOLLOWERS)
            .map(|k| Follower {
                k,
                dir: base.join(format!("F{k}")),
                sync: if k == 0 { "batch" } else { "never" },
                proc: Proc(None),
                kill_at: Instant::now(),
                stderr: PathBuf::new(),
                spawns: 0,
                reset: false,
                early: false,
                started: Instant::now(),
            })
            .collect();
        for f in fols.iter_mut() {
            spawn(f, &srv.url, &mut rng, &mut c);
        }

        // Server SIGKILLs: 3, or one every 20 s of a longer run.
        let mut server_kill_at = moments(&mut rng, (deadline.as_secs() / 20).max(3));
        let start = Instant::now();
        while !writer.is_finished() {
            let frac = start.elapsed().as_secs_f64() / deadline.as_secs_f64();
            // ---- the server
            if let Some(st) = srv.proc.exited() {
                let msg = format!(
                    "the server died on its own ({st}): {}",
                    std::fs::read_to_string(&srv.stderr).unwrap_or_default()
                );
                eprintln!("{} FAILURE: {msg}", clock.t());
                failures.push(msg);
                srv.restart(&a, &logs);
                c.server_restarts += 1;
            } else if server_kill_at.last().is_some_and(|&f| frac >= f) {
                server_kill_at.pop();
                srv.proc.kill();
                c.server_kills += 1;
                std::thread::sleep(Duration::from_millis(rng.below(300)));
                srv.restart(&a, &logs);
                c.server_restarts += 1;
                eprintln!(
                    "{} SIGKILLed the server, restarted on the same port (pid {})",
                    clock.t(),
                    srv.proc.child().id()
                );
            }

            // ---- the followers
            for f in fols.iter_mut() {
                // How it ended: SIGKILLed, stopped with SIGTERM (now and
                // then, past its first half second), or on its own.
                let (st, how) = if let Some(st) = f.proc.exited() {
                    (st, "its exit")
                } else if Instant::now() >= f.kill_at {
                    if !f.early
                        && f.kill_at >= f.started + Duration::from_millis(500)
                        && rng.below(8) == 0
                    {
                        c.follower_sigterms += 1;
                        (terminate(&mut f.proc), "a SIGTERM")
                    } else {
                        c.follower_kills += 1;
                        if f.early {
                            c.follower_early_kills += 1;
                        }
                        (f.proc.kill().unwrap(), "a SIGKILL")
                    }
                } else {
                    continue;
                };
                let text = std::fs::read_to_string(&f.stderr).unwrap_or_default();
                use std::os::unix::process::ExitStatusExt;
                if how == "a SIGKILL" {
                    eprintln!("{} F{} SIGKILLed ({st})", clock.t(), f.k);
                } else if how == "a SIGTERM"
                    && (st.code() == Some(0) || st.signal() == Some(libc::SIGTERM))
                {
                    // Exit 0 once its handler is in; killed by the signal before.
                    eprintln!("{} F{} stopped by SIGTERM ({st}): {}", clock.t(), f.k, text.trim());
                } else if let (Some(2), Some((leader, held))) = (st.code(), other_log(&text)) {
                    // The leader's directory holds a later log than the
                    // one copied: the documented answer is --reset.
                    let (gl, gh) = {
                        let m = lock(&model);
                        (m.gens.get(&leader).copied(), m.gens.get(&held).copied())
                    };
                    eprintln!(
                        "{} F{} exit 2: the leader serves generation {gl:?}, it copies {gh:?}",
                        clock.t(),
                        f.k
                    );
                    c.follower_exits_other_log += 1;
                    if gl.is_none() || gh.is_none() || gl <= gh {
                        let msg = format!(
                            "F{}: refused a log that is not a later one: {}",
                            f.k,
                            text.trim()
                        );
                        eprintln!("{} FAILURE: {msg}", clock.t());
                        failures.push(msg);
                    }
                    f.reset = true;
                } else {
                    let msg = format!("F{} exited on its own ({st}): {}", f.k, text.trim());
                    eprintln!("{} FAILURE: {msg}", clock.t());
                    *c.errors.entry(kind(&text)).or_default() += 1;
                    failures.push(msg);
                }
                c.checks += 1;
                match check_copy(&f.dir, &model, &logs) {
                    Ok(s) => eprintln!("{}   F{}: {s}", clock.t(), f.k),
                    Err(e) => {
                        panic!("seed {seed:#x}: F{} after {how}: {e}\nits stderr: {text}", f.k)
                    }
                }
                spawn(f, &srv.url, &mut rng, &mut c);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let w = writer.join().expect("the writer panicked");
        c.entries_appended = w.entries_appended;
        c.batches = w.batches;
        c.truncations = w.truncations;
        c.entries_truncated = w.entries_truncated;
        c.term_bumps = w.term_bumps;
        c.dir_replacements = w.dir_replacements;
        c.dir_recreations = w.dir_recreations;

        // ---- the end: the writer stopped; every follower catches up once.
        let (leader_last, gen) = {
            let m = lock(&model);
            (m.live.len() as u64, m.gen)
        };
        eprintln!("{} the writer stopped at entry {leader_last} of generation {gen}", clock.t());
        for f in fols.iter_mut() {
            if let Some(st) = f.proc.exited() {
                let text = std::fs::read_to_string(&f.stderr).unwrap_or_default();
                if other_log(&text).is_none() {
                    failures.push(format!("F{} exited on its own ({st}): {}", f.k, text.trim()));
                    *c.errors.entry(kind(&text)).or_default() += 1;
                }
            } else {
                f.proc.kill();
                c.follower_kills += 1;
            }
            c.checks += 1;
            if let Err(e) = check_copy(&f.dir, &model, &logs) {
                panic!("seed {seed:#x}: F{} at the end, before --once: {e}", f.k);
            }
        }
        if let Some(st) = srv.proc.exited() {
            failures.push(format!(
                "the server died on its own ({st}): {}",
                std::fs::read_to_string(&srv.stderr).unwrap_or_default()
            ));
            srv.restart(&a, &logs);
            c.server_restarts += 1;
        }
        for f in fols.iter_mut() {
            let mut reset = false;
            loop {
                let mut cmd = common::mmapkit();
                cmd.args(["log", "follow", &srv.url]).arg(&f.dir).arg("--once");
                if reset {
                    cmd.arg("--reset");
                    c.resets += 1;
                }
                c.follows_once += 1;
                let (st, text) = run_for(
                    &mut cmd,
                    Duration::from_secs(300),
                    &logs.join(format!("once-{}.out", f.k)),
                );
                eprintln!(
                    "{} F{} follow --once{} ({st}): {}",
                    clock.t(),
                    f.k,
                    if reset { " --reset" } else { "" },
                    text.trim()
                );
                if st.success() {
                    break;
                }
                if !reset && st.code() == Some(2) && other_log(&text).is_some() {
                    c.follower_exits_other_log += 1;
                    reset = true;
                    continue;
                }
                *c.errors.entry(kind(&text)).or_default() += 1;
                failures.push(format!("F{}: follow --once failed ({st}): {}", f.k, text.trim()));
                break;
            }
            c.checks += 1;
            if let Err(e) = check_copy(&f.dir, &model, &logs) {
                panic!("seed {seed:#x}: F{} after follow --once: {e}", f.k);
            }
            if let Err(e) = compare(&a, &f.dir) {
                failures.push(format!("F{} differs from the leader after follow --once: {e}", f.k));
            }
        }
        // The leader itself is what the writer wrote.
        {
            let m = lock(&model);
            let x = open_ro(&a).unwrap();
            assert_eq!(x.last_index(), leader_last);
            let es = x.read(1, leader_last + 1, None).unwrap();
            for e in es.iter() {
                let r = &m.recs[&(gen, e.index(), m.live[e.index() as usize - 1])];
                assert_eq!(
                    (e.term(), e.crc()),
                    (r.term, r.crc),
                    "the leader's entry {}",
                    e.index()
                );
            }
        }
        if let Some(st) = srv.proc.exited() {
            failures.push(format!(
                "the server died on its own ({st}): {}",
                std::fs::read_to_string(&srv.stderr).unwrap_or_default()
            ));
        }
    });
    eprintln!("replicate_faults: seed {seed:#x}, {:.1} s: {c:#?}", clock.0.elapsed().as_secs_f64());
    assert!(
        failures.is_empty(),
        "seed {seed:#x}: {} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
