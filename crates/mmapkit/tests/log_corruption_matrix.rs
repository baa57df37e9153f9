//! Corruption matrix for the commit log: logs of a few shapes, and for
//! every byte offset of every segment file (a seeded sample where the file
//! is long): the byte flipped (xor 0xFF), one bit flipped, and separately
//! the file truncated there. Each damaged copy is opened (default
//! options), verified read-only and opened with repair, and the outcome is
//! classified and checked:
//!
//! * `intact`: every entry, byte for byte. Only when the damage is outside
//!   the records (the zero record after the last batch, preallocated
//!   zeros, or a byte that the change leaves equal).
//! * `torn`: everything from the damaged batch on dropped, only when the
//!   damage is in a batch of the tail segment that no later commit record
//!   says was durable (its watermark, parsed here independently, is below
//!   the batch's first index): what a power loss can tear. So the last
//!   batch always, earlier ones only in logs written without sync.
//! * `corrupt`: `Error::Corrupt` naming a segment file of the log; for
//!   damage in a tail batch, exactly when a later commit record's
//!   watermark covers it (or a later one has no watermark: older format).
//!
//! Never a panic, never another entry missing, never a changed byte in an
//! entry returned; the read-only `verify` agrees with opening and reading
//! everything; repair keeps a prefix that holds every batch before the
//! damage, leaves a log that reopens cleanly, and what it cuts off is in
//! the quarantine file, byte for byte.
//!
//! Run with `--nocapture` to see the counts per shape and outcome.
#![allow(clippy::disallowed_methods, reason = "integration tests write their fixtures directly")]

use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};

use mmapkit::log::{CommitLog, LogOptions, SyncMode};
use mmapkit::Error;

mod common;
use common::first_index_of;

const SEG: u64 = 4096;
const HEADER: usize = 32;
const REC: usize = 16;
/// Offsets sampled in the preallocated zeros after the records.
const SAMPLE: usize = 24;
/// Segments with more bytes of records than this are sampled.
const EVERY: usize = 1536;
/// One offset in this many is tried in the middle of a sampled segment.
const THIN: u64 = 5;

type Entry = (u64, u64, Vec<u8>);

fn opts(sync: SyncMode) -> LogOptions {
    common::opts(SEG).sync(sync)
}

fn base() -> PathBuf {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_owned()
    } else {
        std::env::temp_dir()
    }
}

fn payload(i: u64, len: usize) -> Vec<u8> {
    (0..len).map(|k| (i as u8).wrapping_mul(31) ^ k as u8).collect()
}

fn batch(first: u64, lens: &[usize], term: u64) -> Vec<(u64, Vec<u8>)> {
    lens.iter().enumerate().map(|(k, &n)| (term, payload(first + k as u64, n))).collect()
}

/// A log shape: its name, the directory and the entries it holds.
struct Shape {
    name: &'static str,
    dir: tempfile::TempDir,
    entries: Vec<Entry>,
}

fn read_all(log: &CommitLog) -> Result<Vec<Entry>, Error> {
    let es = log.read(log.first_index(), log.last_index() + 1, None)?;
    Ok(es.iter().map(|e| (e.index(), e.term(), e.data().to_vec())).collect())
}

fn build(name: &'static str, sync: SyncMode, script: &dyn Fn(&CommitLog)) -> Shape {
    let dir = tempfile::tempdir_in(base()).unwrap();
    let log = CommitLog::open(dir.path(), opts(sync)).unwrap();
    script(&log);
    let entries = read_all(&log).unwrap();
    drop(log);
    Shape { name, dir, entries }
}

fn append(log: &CommitLog, lens: &[usize], term: u64) {
    let first = log.last_index() + 1;
    log.append(&batch(first, lens, term)).unwrap();
}

fn shapes() -> Vec<Shape> {
    vec![
        build("one segment, sync", SyncMode::Batch, &|l| {
            append(l, &[5, 0, 17], 1);
            append(l, &[16], 1);
            append(l, &[1, 40, 3, 90, 2], 2);
            append(l, &[33, 7], 2);
        }),
        build("rollover, no sync", SyncMode::Never, &|l| {
            for b in 0..9u64 {
                append(l, &[100 + b as usize * 37, 250, 9, 60], 1 + b / 3);
            }
        }),
        build("truncated mid-batch, then appended", SyncMode::Batch, &|l| {
            append(l, &[20, 30, 40], 1);
            append(l, &[50, 60, 70, 80], 1);
            l.truncate_after(5).unwrap();
            append(l, &[11, 12], 2);
            append(l, &[300], 2);
        }),
        build("truncated at a boundary, nothing after", SyncMode::Never, &|l| {
            append(l, &[20, 30], 1);
            append(l, &[50, 60, 70], 1);
            append(l, &[8], 1);
            l.truncate_after(2).unwrap();
        }),
        build("oversized entry, then small batches", SyncMode::Never, &|l| {
            append(l, &[64], 1);
            append(l, &[5000, 10], 1);
            append(l, &[3, 4], 1);
            append(l, &[70], 1);
        }),
    ]
}

/// Segment files of `dir` by first index.
fn segments(dir: &Path) -> BTreeMap<u64, PathBuf> {
    common::segments(dir).into_iter().map(|p| (first_index_of(&p), p)).collect()
}

/// A batch: byte range (entries and commit record), first index, the
/// durable watermark of its commit record (`None`: a 16-byte record
/// without one)
/// and its epoch.
type Batch = (usize, usize, u64, Option<u64>, u32);

/// The batches of a segment, parsed independently of the library.
fn batches(d: &[u8], first: u64) -> Vec<Batch> {
    let mut out = Vec::new();
    let (mut pos, mut start, mut index, mut bfirst) = (HEADER, HEADER, first, first);
    while pos + REC <= d.len() {
        let len = u32::from_le_bytes(d[pos + 4..pos + 8].try_into().unwrap());
        if len == u32::MAX || len == u32::MAX - 1 {
            // crc count epoch [watermark:u64 rcrc:u32 0:u32]
            let wm = (len == u32::MAX - 1)
                .then(|| u64::from_le_bytes(d[pos + 16..pos + 24].try_into().unwrap()));
            let epoch = u32::from_le_bytes(d[pos + 12..pos + 16].try_into().unwrap());
            pos += if wm.is_some() { 2 * REC } else { REC };
            out.push((start, pos, bfirst, wm, epoch));
            start = pos;
            bfirst = index;
        } else if d[pos..pos + REC].iter().all(|&b| b == 0) {
            break;
        } else {
            pos += REC + (len as usize).next_multiple_of(16);
            index += 1;
        }
    }
    out
}

fn copy_dir(from: &Path) -> tempfile::TempDir {
    let to = tempfile::tempdir_in(base()).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() {
            std::fs::copy(&p, to.path().join(p.file_name().unwrap())).unwrap();
        }
    }
    to
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    Intact,
    Torn,
    Corrupt,
}

#[derive(Clone, Copy, Debug)]
enum Damage {
    Flip(u8),
    Truncate,
}

/// Opens `dir` with `o`, reads everything; `Ok(entries)` or the error.
fn open_read(dir: &Path, o: LogOptions, verify: bool) -> Result<Vec<Entry>, Error> {
    let log = CommitLog::open(dir, o)?;
    if verify {
        log.verify()?;
    }
    read_all(&log)
}

struct Case<'a> {
    shape: &'a Shape,
    seg_file: &'a Path,
    /// The segment is the tail.
    tail: bool,
    at: usize,
    damage: Damage,
    orig: &'a [u8],
    /// Byte range of the last batch of the tail segment.
    last_batch: Option<Batch>,
    /// Batches of this segment.
    batches: &'a [Batch],
}

/// What damage in a batch of the tail segment must give: a torn tail when
/// every later commit record's watermark is below the batch's first index
/// (it was never known durable), or when no batch carries the segment's
/// generation (the last change was a truncation, which a crash may have
/// interrupted); else corruption.
fn expected_for_tail_flip(c: &Case) -> Option<(Outcome, u64)> {
    if !c.tail || !matches!(c.damage, Damage::Flip(_)) {
        return None;
    }
    let j = c.batches.iter().position(|b| (b.0..b.1).contains(&c.at))?;
    let bfirst = c.batches[j].2;
    let name = c.seg_file.file_name().unwrap().to_str().unwrap();
    let gen: u32 = name[21..29].parse().unwrap();
    let fresh = c.batches.iter().any(|b| b.4 == gen);
    let covered = c.batches[j + 1..].iter().any(|b| b.3.is_none_or(|w| w >= bfirst && fresh));
    Some((if covered { Outcome::Corrupt } else { Outcome::Torn }, bfirst))
}

fn check_corrupt(e: &Error, c: &Case, what: &str) -> Result<(), String> {
    match e {
        Error::Corrupt { path, .. }
            if path.starts_with(c.shape.dir.path()) || path.parent().is_some() =>
        {
            let name = path.file_name().unwrap_or_default().to_string_lossy().into_owned();
            if name.ends_with(".seg") || path.is_dir() || name.is_empty() {
                Ok(())
            } else {
                Err(format!("{what}: corruption names {path:?}"))
            }
        }
        other => Err(format!("{what}: expected Corrupt, got {other:?}")),
    }
}

/// Classifies a default open; errors describe a broken promise.
fn classify(c: &Case, got: &Result<Vec<Entry>, Error>) -> Result<Outcome, String> {
    let o = classify_any(c, got)?;
    match expected_for_tail_flip(c) {
        Some((want, bfirst)) if want != o => Err(format!(
            "damage in the tail batch from entry {bfirst}: expected {want:?} by the watermark rule, got {o:?}"
        )),
        _ => Ok(o),
    }
}

fn classify_any(c: &Case, got: &Result<Vec<Entry>, Error>) -> Result<Outcome, String> {
    let want = &c.shape.entries;
    let es = match got {
        Err(e) => {
            check_corrupt(e, c, "open")?;
            return Ok(Outcome::Corrupt);
        }
        Ok(es) => es,
    };
    // Every entry returned is byte for byte what was appended, in order.
    for e in es {
        let Some(w) = want.iter().find(|w| w.0 == e.0) else {
            return Err(format!("entry {} was never appended", e.0));
        };
        if w != e {
            return Err(format!("entry {} changed", e.0));
        }
    }
    if es.len() == want.len() {
        return Ok(Outcome::Intact);
    }
    if es.len() > want.len() || want[..es.len()] != es[..] {
        return Err(format!("not a prefix: {} of {} entries", es.len(), want.len()));
    }
    // Only from the damaged batch on, and only where the watermark rule
    // says it was never durable.
    match (expected_for_tail_flip(c), c.last_batch) {
        (Some((Outcome::Torn, bfirst)), Some(_)) if es.len() as u64 == bfirst - want[0].0 => {
            Ok(Outcome::Torn)
        }
        _ => Err(format!(
            "silent loss: {} of {} entries returned without an error",
            es.len(),
            want.len()
        )),
    }
}

fn run_case(
    c: &Case,
    counts: &mut BTreeMap<(String, Outcome, Outcome), u64>,
) -> Result<(), String> {
    let dmg = copy_dir(c.shape.dir.path());
    let seg = dmg.path().join(c.seg_file.file_name().unwrap());
    let bytes: Vec<u8> = match c.damage {
        Damage::Flip(x) => {
            let mut b = c.orig.to_vec();
            b[c.at] ^= x;
            b
        }
        Damage::Truncate => c.orig[..c.at].to_vec(),
    };
    std::fs::write(&seg, &bytes).unwrap();
    let never = opts(SyncMode::Never);

    // Read-only verify first (the default open may cut a torn tail).
    let ro = open_read(dmg.path(), never.clone().read_only(true), true);
    let dflt = open_read(dmg.path(), never.clone(), false);
    let outcome = classify(c, &dflt)?;
    let ro_outcome = classify(c, &ro).map_err(|e| format!("read-only verify: {e}"))?;
    if ro_outcome != outcome || ro.as_ref().ok().map(Vec::len) != dflt.as_ref().ok().map(Vec::len) {
        return Err(format!("verify disagrees with open: verify {ro_outcome:?}, open {outcome:?}"));
    }
    if outcome == Outcome::Intact {
        let real = match c.damage {
            Damage::Flip(_) => c.batches.last().map_or(HEADER, |b| b.1),
            Damage::Truncate => 0,
        };
        if c.at < real && c.at >= HEADER.min(real)
            || (matches!(c.damage, Damage::Flip(_)) && c.at < HEADER)
        {
            return Err(format!("undetected damage at {} (inside the records)", c.at));
        }
    }
    if outcome != Outcome::Corrupt {
        // The default open reopens to the same entries.
        let again =
            open_read(dmg.path(), never.clone(), true).map_err(|e| format!("reopen: {e}"))?;
        if dflt.as_ref().ok() != Some(&again) {
            return Err("reopen after recovery differs".into());
        }
    }

    // Repair, on a fresh damaged copy.
    let rep = copy_dir(c.shape.dir.path());
    let rseg = rep.path().join(c.seg_file.file_name().unwrap());
    std::fs::write(&rseg, &bytes).unwrap();
    let ropts = never.clone().repair(true);
    let repaired = CommitLog::open(rep.path(), ropts).and_then(|log| {
        let r = log.recovery().clone();
        let tail_used = log.stat()?.tail_used as usize;
        read_all(&log).map(|es| (es, r, tail_used))
    });
    let rep_outcome = match &repaired {
        Err(e) => {
            check_corrupt(e, c, "repair")?;
            // Repair gives up only on sealed segments and headers.
            if c.tail && c.at >= HEADER && matches!(c.damage, Damage::Flip(_)) {
                return Err(format!("repair failed on the tail: {e}"));
            }
            Outcome::Corrupt
        }
        Ok((es, r, tail_used)) => {
            let want = &c.shape.entries;
            if es.len() > want.len() || want[..es.len()] != es[..] {
                return Err("repair kept something that is not a prefix".into());
            }
            // Every batch before the damage is kept: entries up to the
            // first index of the batch the damage is in (or after).
            if c.tail {
                let need = c
                    .batches
                    .iter()
                    .find(|b| b.1 > c.at)
                    .map_or(want.last().map_or(0, |w| w.0 + 1), |b| b.2);
                let kept_to = want[0].0 + es.len() as u64;
                if c.at >= HEADER && kept_to < need {
                    return Err(format!(
                        "repair kept entries before {kept_to}, the damage at {} is in the batch from {need}",
                        c.at
                    ));
                }
            }
            // What was cut is in the quarantine file, byte for byte.
            if let Some(q) = &r.quarantine {
                let name = q.file_name().unwrap().to_str().unwrap();
                let from: usize = name.rsplit('.').nth(1).unwrap().parse().unwrap();
                let cut = std::fs::read(q).unwrap();
                // (A truncated file is given its zeros back first.)
                let mut bytes = bytes.clone();
                bytes.resize(bytes.len().max(c.orig.len()), 0);
                if cut[..] != bytes[from..from + cut.len()] {
                    return Err("quarantine file differs from what was cut".into());
                }
                if bytes[from + cut.len()..].iter().any(|&b| b != 0) {
                    return Err("repair cut data that is not in the quarantine file".into());
                }
                if from != *tail_used {
                    return Err(format!("cut at {from}, log ends at {tail_used}"));
                }
            } else if r.dropped_bytes > 0 && !matches!(c.damage, Damage::Truncate) {
                return Err("bytes dropped without a quarantine file".into());
            }
            // The repaired log reopens cleanly to the same entries.
            let again = open_read(rep.path(), never.clone(), true)
                .map_err(|e| format!("reopen after repair: {e}"))?;
            if &again != es {
                return Err("reopen after repair differs".into());
            }
            if es.len() == c.shape.entries.len() {
                Outcome::Intact
            } else {
                Outcome::Torn
            }
        }
    };
    let kind = match c.damage {
        Damage::Flip(0xFF) => "flip byte",
        Damage::Flip(_) => "flip bit",
        Damage::Truncate => "truncate",
    };
    *counts.entry((format!("{} / {kind}", c.shape.name), outcome, rep_outcome)).or_default() += 1;
    Ok(())
}

/// Offsets to try in a file of `len` bytes whose records end at `used`
/// and whose last batch starts at `last`: every one for a file with up
/// to `EVERY` bytes of records; else every one in the header, the first
/// record and from the last batch to 16 bytes after the zero record that
/// follows it, and a seeded sample of one in `THIN` of the rest; then a
/// seeded sample of the preallocated zeros and the file's last byte.
fn offsets(len: usize, used: usize, last: usize, seed: u64) -> Vec<usize> {
    let every = (used + 2 * REC).min(len);
    let mut x = seed | 1;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut v: Vec<usize> = if used <= EVERY {
        (0..every).collect()
    } else {
        (0..every)
            .filter(|&o| o < HEADER + REC || o + 2 * REC >= last || rnd() % THIN == 0)
            .collect()
    };
    if len > every {
        for _ in 0..SAMPLE {
            v.push(every + (rnd() % (len - every) as u64) as usize);
        }
        v.push(len - 1);
    }
    v.sort_unstable();
    v.dedup();
    v
}

#[test]
fn every_offset_flipped_and_truncated() {
    let t0 = std::time::Instant::now();
    let mut counts = BTreeMap::new();
    let mut failures = Vec::new();
    let mut tried = 0u64;
    for shape in shapes() {
        let t = std::time::Instant::now();
        let before = tried;
        let segs = segments(shape.dir.path());
        let tail_first = *segs.keys().last().unwrap();
        for (&first, file) in &segs {
            let orig = std::fs::read(file).unwrap();
            let bs = batches(&orig, first);
            let tail = first == tail_first;
            let last_batch = if tail { bs.last().copied() } else { None };
            let used = bs.last().map_or(HEADER, |b| b.1);
            let last = bs.last().map_or(HEADER, |b| b.0);
            for at in offsets(orig.len(), used, last, first ^ orig.len() as u64) {
                let bit = 1u8 << (at % 8);
                for damage in [Damage::Flip(0xFF), Damage::Flip(bit), Damage::Truncate] {
                    let c = Case {
                        shape: &shape,
                        seg_file: file,
                        tail,
                        at,
                        damage,
                        orig: &orig,
                        last_batch,
                        batches: &bs,
                    };
                    tried += 1;
                    let r =
                        std::panic::catch_unwind(AssertUnwindSafe(|| run_case(&c, &mut counts)));
                    let msg = match r {
                        Ok(Ok(())) => continue,
                        Ok(Err(m)) => m,
                        Err(p) => format!(
                            "panic: {}",
                            p.downcast_ref::<String>()
                                .cloned()
                                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                                .unwrap_or_default()
                        ),
                    };
                    failures.push(format!(
                        "{} / segment {first} / {damage:?} at {at}: {msg}",
                        shape.name
                    ));
                }
            }
        }
        println!("{}: {} cases in {:?}", shape.name, tried - before, t.elapsed());
    }
    println!("log corruption matrix: {tried} cases in {:?}", t0.elapsed());
    println!("{:<60} {:>8} {:>8} {:>7}", "shape / damage", "open", "repair", "cases");
    for ((k, o, r), n) in &counts {
        println!("{k:<60} {:>8} {:>8} {n:>7}", format!("{o:?}"), format!("{r:?}"));
    }
    assert!(
        failures.is_empty(),
        "{} of {tried} cases broke a promise; first ones:\n{}",
        failures.len(),
        failures[..failures.len().min(40)].join("\n")
    );
}
