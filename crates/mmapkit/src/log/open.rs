//! Opening a log: listing and mapping segments, recovering the tail (torn
//! batches to quarantine, corruption refused), and refreshing a read-only view.

use super::*;

pub(super) struct Loaded {
    segs: Vec<Seg>,
    last: u64,
    tail_end: usize,
    next_gen: u32,
    recovery: Recovery,
    tail: Arc<SegFile>,
    /// Nominal segment size of the log.
    seg_size: u64,
    /// Bytes of the tail to cut off on a writable open (start, end).
    cut: Option<(usize, usize)>,
    id: Option<Arc<str>>,
    cuts: identity::Cuts,
    dir_key: (u64, u64),
}

/// (device, inode) of `dir`.
pub(super) fn dir_key(dir: &Path) -> Result<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(dir).map_err(|e| Error::io(dir, "stat", e))?;
    Ok((m.dev(), m.ino()))
}

/// Nominal segment size a new log gets from `opts`.
pub(super) fn new_seg_size(opts: &LogOptions) -> u64 {
    opts.segment_size.next_multiple_of(format::SIZE_UNIT)
}

/// Whether `dir` holds a log (at least one segment file).
pub fn is_log_dir(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|rd| {
        rd.flatten().any(|e| segment::parse_name(&e.file_name().to_string_lossy()).is_some())
    })
}

/// Quarantine directory of the log in `dir`: what recovery cuts off goes
/// there, never away.
pub fn quarantine_dir(dir: &Path) -> PathBuf {
    dir.join("quarantine")
}

/// Copies `bytes` (cut from segment `seg` at byte `at`) durably to
/// `DIR/quarantine/<segment file>.<at>.bad` (`.<at>.<n>.bad` if taken):
/// written and synced under a temp name, then linked in (never replacing).
pub(super) fn quarantine(dir: &Path, seg: &Path, at: usize, bytes: &[u8]) -> Result<PathBuf> {
    let q = quarantine_dir(dir);
    crate::fs::create_dir_durably(&q)?;
    let name = seg.file_name().unwrap_or_default().to_string_lossy();
    let p = (0u32..)
        .map(|n| match n {
            0 => q.join(format!("{name}.{at}.bad")),
            n => q.join(format!("{name}.{at}.{n}.bad")),
        })
        .find(|p| !p.exists())
        .expect("u32 names exhausted");
    let tmp = crate::fs::TempFile::beside(&p)?;
    tmp.file()
        .write_all_at(bytes, 0)
        .and_then(|()| tmp.file().sync_all())
        .map_err(|e| Error::io(tmp.path(), "write", e))?;
    tmp.link_to(&p)?;
    sync_dir(&q)?;
    sync_dir(dir)?;
    Ok(p)
}

/// Moves a whole file into the quarantine directory.
pub(super) fn quarantine_file(dir: &Path, p: &Path) -> Result<()> {
    let q = quarantine_dir(dir);
    crate::fs::create_dir_durably(&q)?;
    let to = q.join(p.file_name().unwrap_or_default());
    crate::fs::rename(p, &to)?;
    sync_dir(&q)?;
    sync_dir(dir)
}

/// Lists, maps and checks the segments of `dir` and recovers the tail.
/// Sealed segments of `reuse` (a previous load) that are still there are
/// kept as they are, mapped and indexed.
pub(super) fn load(dir: &Path, opts: &LogOptions, reuse: &[Seg]) -> Result<Loaded> {
    use std::os::unix::fs::DirEntryExt;
    let writable = !opts.read_only;
    // The history first: a read-only view is tagged with what was
    // completed before it listed anything (see `identity`).
    let cuts = identity::read_cuts(dir)?;
    let mut found: Vec<(u64, u32, PathBuf)> = Vec::new();
    let mut inos: Vec<((u64, u32), u64)> = Vec::new();
    if writable {
        // Segment temp files of processes that died mid-creation.
        crate::fs::remove_stale_temp_files(dir, |t| {
            segment::parse_name(&t.to_string_lossy()).is_some()
        });
    }
    let rd = std::fs::read_dir(dir).map_err(|e| Error::io(dir, "read_dir", e))?;
    let dir_key = dir_key(dir)?;
    for ent in rd {
        let ent = ent.map_err(|e| Error::io(dir, "read_dir", e))?;
        let name = ent.file_name();
        let name = name.to_string_lossy();
        if let Some((first, gen)) = segment::parse_name(&name) {
            found.push((first, gen, ent.path()));
            inos.push(((first, gen), ent.ino()));
        } else if writable && name.ends_with(".seg.tmp") {
            // A segment whose creation a crash interrupted.
            let _ = crate::fs::remove_file(&ent.path());
        }
    }
    found.sort();
    // Two segments with one first index: the older ones must hold no
    // entry (an empty tail that an old version duplicated instead of
    // replacing); they are set aside. Anything else is corruption.
    let mut k = 0;
    while k + 1 < found.len() {
        if found[k].0 != found[k + 1].0 {
            k += 1;
            continue;
        }
        let (first, gen, path) = found[k].clone();
        let empty = SegFile::open(path.clone(), first, gen, false)
            .is_ok_and(|f| format::scan(f.data(), first, gen, None, false).batches == 0);
        if !empty {
            return Err(Error::Corrupt {
                path: dir.to_owned(),
                detail: format!(
                    "two segments start at index {first}: {} and {}",
                    path.display(),
                    found[k + 1].2.display()
                ),
            });
        }
        if writable {
            quarantine_file(dir, &path)?;
        }
        found.remove(k);
    }
    let mut next_gen = found.iter().map(|f| f.1).max().unwrap_or(0) + 1;
    let mut segs = Vec::with_capacity(found.len().max(1));
    if found.is_empty() {
        if !writable {
            return Err(Error::Format {
                path: dir.to_owned(),
                detail: "no log segments here".into(),
            });
        }
        let size = new_seg_size(opts);
        let f = SegFile::create(dir, opts.first_index, next_gen, size, size)?;
        next_gen += 1;
        segs.push(Seg { file: Arc::new(f), offsets: Some(Vec::new()) });
    } else {
        let nexts: Vec<Option<u64>> =
            found.iter().skip(1).map(|f| Some(f.0)).chain([None]).collect();
        for ((first, gen, path), next) in found.into_iter().zip(nexts) {
            // Only the very file, mapped whole: a segment that was this
            // view's tail is mapped up to that tail's end, and one rewritten
            // below its seal is a new file under the same name.
            let ino = inos.iter().find(|(k, _)| *k == (first, gen)).map(|x| x.1);
            let old = reuse.iter().find(|s| {
                s.file.first == first
                    && s.file.gen() == gen
                    && Some(s.file.ino) == ino
                    && s.file.map.sealed() == s.file.map.len()
            });
            segs.push(match (old, next) {
                (Some(s), Some(next)) => {
                    // An index built while it was still the tail may be short.
                    let whole = s.offsets.as_ref().is_some_and(|o| o.len() as u64 == next - first);
                    Seg {
                        file: s.file.clone(),
                        offsets: if whole { s.offsets.clone() } else { None },
                    }
                }
                _ => {
                    let f = SegFile::open(path, first, gen, writable)?;
                    if let Some(e) = f.long() {
                        return Err(e);
                    }
                    if let (Some(want), Some(_)) = (f.short(), next) {
                        return Err(f.corrupt(format!(
                            "the file is {} bytes, its header says {want}: it was truncated",
                            f.map.len()
                        )));
                    }
                    Seg { file: Arc::new(f), offsets: None }
                }
            });
        }
    }

    let mut tail = segs.last().expect("one segment").file.clone();
    // The nominal segment size: recorded in the headers; logs made before
    // it was recorded use their smallest segment (oversized ones are larger).
    let seg_size = tail.header.seg_size.unwrap_or_else(|| {
        let min = segs.iter().map(|s| s.file.map.len() as u64).min();
        min.unwrap_or(0).max(4096)
    });

    // A truncated tail: with repair, give the file its length back (the
    // cut bytes are gone) and recover what is left below.
    let mut extended = 0u64;
    if let Some(want) = tail.short() {
        let have = tail.map.len() as u64;
        // Found by the log_recovery fuzz target: a longer file made the
        // length restored below underflow (`want - have`).
        if let Some(e) = tail.long() {
            return Err(e);
        }
        if !(opts.repair && writable) || have < HEADER_LEN as u64 {
            return Err(tail.corrupt(format!(
                "the file is {have} bytes, its header says {want}: it was truncated \
                 (open with repair to keep the entries before the cut)"
            )));
        }
        let p = tail.path();
        let f = crate::fs::open_in_place(&p, crate::fs::InPlace::Write)?;
        f.set_len(want).and_then(|()| f.sync_all()).map_err(|e| Error::io(&p, "extend", e))?;
        tail = Arc::new(SegFile::open(p, tail.first, tail.gen(), true)?);
        segs.last_mut().expect("one segment").file = tail.clone();
        extended = want - have;
    }

    // Recover the tail.
    let d = tail.data();
    let mut tries = 0;
    let mut seen: Option<(usize, usize, u32)> = None;
    let (sc, verdict) = loop {
        let sc = format::scan(d, tail.first, tail.gen(), None, false);
        let v = format::classify_tail(d, &sc, tail.first, tail.gen());
        if let (format::Tail::Corrupt { to, .. }, false) = (&v, writable) {
            // A read-only scan may race the writing process (it saw a batch
            // half written, then later batches): corruption only when two
            // scans a moment apart agree on where and on the bytes.
            let now = (sc.end, *to, crc32c::crc32c(&d[sc.end..*to]));
            if tries < 50 && seen != Some(now) {
                seen = Some(now);
                tries += 1;
                std::thread::sleep(Duration::from_millis(2));
                continue;
            }
        }
        break (sc, v);
    };
    let cut = match verdict {
        format::Tail::Clean => None,
        format::Tail::Torn { to } => Some((sc.end, to)),
        format::Tail::Corrupt { detail, to } => {
            if !(opts.repair && writable) {
                let how = if writable {
                    " (open with repair to keep the entries before it; what is cut goes to the quarantine directory)"
                } else {
                    ""
                };
                return Err(tail.corrupt(format!("{detail}{how}")));
            }
            Some((sc.end, to))
        }
    };
    let dropped = cut.map_or(0, |(a, b)| {
        // Entries a repair drops: the counts of the commit records cut.
        let counted: u64 = (a..b)
            .step_by(REC)
            .filter(|&q| q + REC <= d.len() && format::commit_len(d, q).is_some())
            .map(|q| u32_at(d, q + 8) as u64)
            .filter(|&c| c as usize <= (b - a) / REC)
            .sum();
        counted.max(sc.pending)
    });
    let recovery = Recovery {
        dropped_entries: dropped,
        dropped_bytes: cut.map_or(0, |(a, b)| (b - a) as u64) + extended,
        tail_segment: tail.path(),
        quarantine: None,
    };
    let last = tail.first + sc.offsets.len() as u64 - 1;
    let tail_end = sc.end;
    segs.last_mut().expect("one segment").offsets = Some(sc.offsets);
    // The tail was mapped sealed whole for the scan: from here on only
    // its committed prefix may be handed out, and appends go after it.
    drop(tail);
    let t = &mut segs.last_mut().expect("one segment").file;
    Arc::get_mut(t).expect("the tail is mapped fresh by every load").map.set_sealed(tail_end)?;
    let tail = t.clone();
    let id = if writable { Some(identity::ensure_id(dir)?) } else { identity::read_id(dir)? };
    Ok(Loaded { segs, last, tail_end, next_gen, recovery, tail, seg_size, cut, id, cuts, dir_key })
}

/// Creates a new log in `dir` when there is none (`dir` missing or an
/// empty directory): built whole in a temporary directory beside it and
/// renamed into place, so a kill at any moment leaves either no log or a
/// complete, empty one (never a directory `verify` rejects). Anything else
/// is left to the open that follows.
fn create_new(dir: &Path, opts: &LogOptions) -> Result<()> {
    // Through a symlink to a directory: the log is made in the directory
    // it names (a dangling one is left to the open, which refuses it).
    let real = match std::fs::symlink_metadata(dir) {
        Ok(m) if m.file_type().is_symlink() => match std::fs::canonicalize(dir) {
            Ok(p) => p,
            Err(_) => return crate::fs::create_dir_durably(dir),
        },
        _ => dir.to_owned(),
    };
    let dir = real.as_path();
    if dir.file_name().is_none() {
        // `.`, `/`: cannot be renamed into place.
        return crate::fs::create_dir_durably(dir);
    }
    let empty = match std::fs::read_dir(dir) {
        Ok(mut rd) => rd.next().is_none(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => true,
        Err(e) => return Err(Error::io(dir, "read_dir", e)),
    };
    if !empty {
        return Ok(());
    }
    let parent = crate::fs::parent(dir);
    crate::fs::create_dir_durably(parent)?;
    let tmp = crate::fs::temp_path(dir);
    crate::fs::create_dir(&tmp)?;
    let built = (|| {
        let size = new_seg_size(opts);
        // Nobody sees `tmp` yet: its entries are synced once, below, before
        // it is renamed into place.
        SegFile::create_unlisted(&tmp, opts.first_index, 1, size, size)?;
        identity::write_id(&tmp)?;
        sync_dir(&tmp)
    })();
    let placed = built.and_then(|()| {
        // rename(2) replaces an empty directory atomically; a non-empty
        // one (another process made the log meanwhile) is kept.
        match crate::fs::rename(&tmp, dir) {
            Ok(()) => sync_dir(parent),
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOTEMPTY) | Some(libc::EEXIST)) => {
                Ok(())
            }
            Err(e) => Err(e),
        }
    });
    if tmp.exists() {
        let _ = crate::fs::remove_dir_all(&tmp);
    }
    placed?;
    crate::fs::create_dir_durably(dir)
}

impl CommitLog {
    /// Opens the log in `dir`, creating the directory and an empty log if
    /// missing (unless read-only), and recovers its tail.
    pub fn open(dir: impl AsRef<Path>, opts: LogOptions) -> Result<CommitLog> {
        let dir = dir.as_ref().to_owned();
        if opts.first_index == 0 {
            return Err(Error::invalid(&dir, "first_index must be at least 1"));
        }
        if opts.segment_size < 4096 {
            return Err(Error::invalid(
                &dir,
                format!("segment_size must be at least 4096 bytes, not {}", opts.segment_size),
            ));
        }
        let writable = !opts.read_only;
        if writable {
            create_new(&dir, &opts)?;
        }
        // The flock below does not conflict within one process (another
        // handle of ours may hold it): a registry tells that case apart.
        let registered = if writable { Some(WriterReg::register(&dir)?) } else { None };
        let lock_file = if writable {
            let p = dir.join("LOCK");
            let f = crate::fs::open_in_place(&p, crate::fs::InPlace::Create)?;
            if !crate::fs::try_lock_exclusive(&f, &p)? {
                return Err(Error::invalid(
                    &dir,
                    "the log is open for writing by another process (open it read-only)",
                ));
            }
            Some(f)
        } else {
            None
        };

        let ld = load(&dir, &opts, &[])?;
        let Loaded {
            segs,
            last,
            tail_end,
            next_gen,
            mut recovery,
            tail,
            seg_size,
            cut,
            id,
            cuts,
            dir_key,
        } = ld;
        let cuts_file = if writable { Some(identity::CutsFile::open(&dir, &cuts)?) } else { None };
        let publisher = if writable { Some(durable::Publisher::open(&dir)?) } else { None };
        let seen = if writable { None } else { durable::read(&dir)? };
        let log = CommitLog {
            dir,
            appended: Appended::default(),
            zero_ahead: AtomicUsize::new(if writable && opts.sync == SyncMode::Batch {
                DEFAULT_ZERO_AHEAD
            } else {
                0
            }),
            behind: WriteBehind::default(),
            state: RwLock::new(State { segs, last, tail_end, id, cuts: Arc::new(cuts), dir_key }),
            writer: Mutex::new(Writer {
                next_gen,
                cuts: cuts_file,
                batch: Default::default(),
                wb: (0, 0),
            }),
            sync: Mutex::new(SyncState {
                durable: last,
                running: false,
                last: Instant::now(),
                synced: (0, 0),
                cuts: 0,
            }),
            durable: AtomicU64::new(last),
            synced: Condvar::new(),
            syncs: AtomicU64::new(0),
            recovery: Recovery::default(),
            poisoned: AtomicBool::new(false),
            failure: Mutex::new(String::new()),
            publisher,
            seen: Mutex::new(seen),
            seg_size,
            opts,
            _lock: lock_file,
            _registered: registered,
        };
        if writable {
            // A truncation a crash interrupted is closed first: it was not
            // acknowledged, so what is left of it (a longer prefix of the
            // old log) stays; its intent already told readers to drop
            // everything after its index, and they fetch the rest again.
            let pending = log.read_state().cuts.pending();
            if let Some(after) = pending {
                log.cut_done(&mut lock(&log.writer), after)?;
            }
        }
        if let (true, Some((from, to))) = (writable, cut) {
            // Cut the torn (or, with repair, damaged) bytes off for good:
            // moved to the quarantine directory first, then a new
            // generation, then zeroed from the far end down to the cut, so
            // they can never complete later and a crash meanwhile leaves
            // at most a shorter torn area.
            // A reader (a server of this log) may have seen the cut
            // batches before the crash: the cut is recorded as a
            // truncation, so that its followers drop them too.
            let to = to.min(tail.map.len());
            let mut bytes = vec![0u8; to.saturating_sub(from)];
            tail.map.read_at(from, &mut bytes)?;
            let mut w = lock(&log.writer);
            log.cut_started(&mut w, last)?;
            recovery.quarantine = Some(quarantine(&log.dir, &tail.path(), from, &bytes)?);
            log.bump(&mut w, &tail)?;
            drop(tail); // the rewrite below needs the tail to itself
            log.zero_range(from, to.max(from + REC))?;
            log.cut_done(&mut w, last)?;
            debug_assert_eq!(tail_end, from);
        } else {
            drop(tail);
        }

        if writable {
            // What an earlier process appended may still be only in the
            // page cache: it counts as durable (the watermark later batches
            // carry) once synced. Without syncs only sealed segments are.
            let t = log.tail();
            let mut st = lock(&log.sync);
            if log.opts.sync == SyncMode::Never {
                let v = st.durable.min(t.first - 1);
                log.set_durable(&mut st, v);
            } else {
                t.map.flush_range(0, tail_end, true)?;
                st.synced = (t.first, tail_end);
            }
            // This incarnation's first mark.
            let v = st.durable;
            log.set_durable(&mut st, v);
        }
        let mut log = log;
        log.recovery = recovery;
        Ok(log)
    }

    /// Whether this read-only view is what loading the directory again
    /// would make: the same truncation history (read first, as `load`
    /// does), the same segment files (names and inodes; a truncation
    /// renames the file it cuts, a purge removes some, a roll-over adds
    /// one), the tail file's length, and nothing written after the tail's
    /// last batch: every append leaves a zero record after its batch, and
    /// any batch written there starts with a record whose first 32 bytes
    /// are not all zeros (an entry's length or the commit mark after an
    /// empty one). Then `refresh` keeps the view instead of mapping and
    /// scanning the tail again (a follower catching up from a quiet log
    /// made the leader rescan its tail every few pages).
    fn unchanged(&self) -> Result<bool> {
        use std::os::unix::fs::DirEntryExt;
        let cuts = identity::read_cuts(&self.dir)?;
        let s = self.read_state();
        if cuts != *s.cuts {
            return Ok(false);
        }
        let mut listed = Vec::with_capacity(s.segs.len());
        let rd = std::fs::read_dir(&self.dir).map_err(|e| Error::io(&self.dir, "read_dir", e))?;
        for ent in rd {
            let ent = ent.map_err(|e| Error::io(&self.dir, "read_dir", e))?;
            if let Some((first, gen)) = segment::parse_name(&ent.file_name().to_string_lossy()) {
                listed.push((first, gen, ent.ino()));
            }
        }
        listed.sort_unstable();
        if !listed
            .iter()
            .copied()
            .eq(s.segs.iter().map(|g| (g.file.first, g.file.gen(), g.file.ino)))
        {
            return Ok(false);
        }
        let tail = &s.segs.last().expect("one segment").file;
        if tail.map.file_len()? != tail.map.len() as u64 {
            return Ok(false);
        }
        let mut after = [0u8; 32];
        let n = crate::map::pread_full(tail.map.file(), &mut after, s.tail_end as u64)
            .map_err(|e| Error::io(&tail.path(), "read", e))?;
        Ok(after[..n].iter().all(|&b| b == 0))
    }

    /// For a read-only log: picks up what the writing process has done
    /// since (new entries and segments, truncations, purges) by loading the
    /// log again. Entries already returned stay valid. A writable log is
    /// always current, so this does nothing there.
    pub fn refresh(&self) -> Result<()> {
        if !self.opts.read_only {
            return Ok(());
        }
        // Read first: a mark is never ahead of what it was durable for,
        // and the view loaded after it holds at least that much (or a
        // truncation, in the history, says what was cut).
        *lock(&self.seen) = durable::read(&self.dir)?;
        // The same log still? A directory replaced (another inode) or
        // holding another log (another id) is loaded afresh: nothing of
        // the old one is served from stale mappings.
        let same = {
            let s = self.read_state();
            dir_key(&self.dir)? == s.dir_key && identity::read_id(&self.dir)? == s.id
        };
        if same && self.unchanged()? {
            return Ok(());
        }
        // A segment listed a moment ago can be gone when it is opened (the
        // writer purged, truncated or renamed it meanwhile): list again.
        let mut tries = 0;
        let ld = loop {
            let r = {
                let s = self.read_state();
                load(&self.dir, &self.opts, if same { &s.segs } else { &[] })
            };
            match r {
                Err(e)
                    if tries < 50
                        && e.kind() == crate::ErrorKind::NotFound
                        && e.path() != Some(self.dir.as_path()) =>
                {
                    tries += 1;
                    std::thread::sleep(Duration::from_millis(1));
                }
                r => break r?,
            }
        };
        *self.write_state() = State {
            segs: ld.segs,
            last: ld.last,
            tail_end: ld.tail_end,
            id: ld.id,
            cuts: Arc::new(ld.cuts),
            dir_key: ld.dir_key,
        };
        Ok(())
    }
}
