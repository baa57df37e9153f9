//! On-disk format of a log segment, as pure functions over byte slices
//! (so every rule is unit-testable without files).
//!
//! ```text
//! segment  = header(32) record*  (zeros or stale bytes after the last record)
//! header   = "MMKLOG01" first_index:u64 file_len:u64 seg_size_4k:u32 crc32c:u32
//!            (file_len and seg_size_4k are 0 in logs made before they were
//!            recorded: the file's length unchecked, the size then inferred)
//! record   = entry | commit | commit1 (each starts 16-byte aligned)
//! entry    = crc:u32 len:u32 term:u64 payload[len] zero-pad-to-16
//!            crc = CRC32C, seeded from the entry's index, of every byte after it
//! commit   = crc:u32 0xFFFF_FFFE count:u32 epoch:u32 watermark:u64 rcrc:u32 0:u32
//!            crc  = crc32c(first:u64 ‖ count ‖ epoch ‖ watermark ‖ crc of each entry)
//!            rcrc = crc32c(the record's first 24 bytes)
//! commit1  = crc:u32 0xFFFF_FFFF count:u32 epoch:u32     (older logs; still
//!            written where a truncation rewrites a batch's commit in place)
//!            crc = crc32c(first:u64 ‖ count ‖ epoch ‖ crc of each entry of the batch)
//! ```
//!
//! Logs written since the watermark was added cannot be read by older
//! versions (they see `0xFFFF_FFFE` as a broken record); older logs read
//! as before.
//!
//! * The entry CRC (one pass over the contiguous frame) is seeded with the
//!   entry's **index**, so a frame left over from
//!   an earlier layout (stale bytes after a truncation) never validates at
//!   a position where another index is expected.
//! * A batch counts only once its commit record validates: it binds the
//!   batch's first index, its length and every entry's CRC, so recovery can
//!   tell a complete batch from a torn one even when the disk wrote pages
//!   out of order.
//! * `epoch` is the segment file's generation when the batch was written
//!   (the number in its name, bumped by every truncation inside it). A
//!   valid batch must have an epoch no smaller than the batch before it and
//!   no larger than the file's generation, so stale batches that a
//!   truncation left behind are never resurrected: everything written
//!   after a truncation carries a larger epoch than everything before it.
//! * `watermark` is the highest index known durable (a sync had returned,
//!   or a segment roll-over had synced it) when the batch was framed. A
//!   damaged batch from index `i` followed by a commit record (valid by its
//!   own `rcrc`) whose watermark is `>= i` was durable before a later batch
//!   was written: corruption. If every later watermark is below `i` the
//!   damage lies in the unsynced window a power loss may tear out of order
//!   (several unsynced batches: group commit, `sync=never`/`interval`): a
//!   torn tail.
//! * 16-byte alignment keeps every 16-byte record header inside one disk
//!   sector, so rewriting one (truncation) is atomic.

pub(crate) const MAGIC: [u8; 8] = *b"MMKLOG01";
/// Bytes of the segment header; records start here.
pub(crate) const HEADER_LEN: usize = 32;
/// Bytes of an entry header and of a commit record.
pub(crate) const REC: usize = 16;
/// `len` value that marks a 16-byte commit record without a watermark
/// (older logs, and truncation's in-place rewrite: one sector-atomic record).
pub(crate) const COMMIT_MARK: u32 = u32::MAX;
/// `len` value that marks a 32-byte commit record with a watermark.
pub(crate) const COMMIT_WM_MARK: u32 = u32::MAX - 1;
/// Bytes of a commit record with a watermark.
pub(crate) const COMMIT_WM: usize = 32;

/// Bytes of the commit record at `pos`, if one starts there.
#[inline]
pub(crate) fn commit_len(d: &[u8], pos: usize) -> Option<usize> {
    match u32_at(d, pos + 4) {
        COMMIT_MARK => Some(REC),
        COMMIT_WM_MARK => Some(COMMIT_WM),
        _ => None,
    }
}

/// Watermark of the 32-byte commit record at `pos` if the record is intact
/// by its own checksum (its entries unchecked).
pub(crate) fn record_watermark(d: &[u8], pos: usize) -> Option<u64> {
    if pos + COMMIT_WM > d.len() || u32_at(d, pos + 4) != COMMIT_WM_MARK {
        return None;
    }
    let ok = crc32c::crc32c(&d[pos..pos + 24]) == u32_at(d, pos + 24) && u32_at(d, pos + 28) == 0;
    ok.then(|| u64_at(d, pos + 16))
}
/// Largest payload an entry may have.
pub(crate) const MAX_ENTRY: usize = (u32::MAX - 16) as usize;

/// Payload length rounded up to the 16-byte record alignment.
#[inline]
pub(crate) fn padded(len: usize) -> usize {
    (len + 15) & !15
}

/// Bytes an entry with `len` payload bytes takes.
#[inline]
pub(crate) fn frame_size(len: usize) -> usize {
    REC + padded(len)
}

#[inline]
pub(crate) fn u32_at(d: &[u8], pos: usize) -> u32 {
    u32::from_le_bytes(d[pos..pos + 4].try_into().expect("4 bytes"))
}

#[inline]
pub(crate) fn u64_at(d: &[u8], pos: usize) -> u64 {
    u64::from_le_bytes(d[pos..pos + 8].try_into().expect("8 bytes"))
}

/// Unit of the nominal segment size stored in the header.
pub(crate) const SIZE_UNIT: u64 = 4096;

/// What a segment header says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    pub first: u64,
    /// The file's allocated length (`None`: not recorded, an older log).
    pub file_len: Option<u64>,
    /// The log's nominal segment size (`None`: not recorded).
    pub seg_size: Option<u64>,
}

/// The segment header for a segment whose first entry is `first_index`,
/// of `file_len` bytes, in a log of nominal `seg_size` (a multiple of
/// [`SIZE_UNIT`]) segments.
pub(crate) fn encode_header(first_index: u64, file_len: u64, seg_size: u64) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[..8].copy_from_slice(&MAGIC);
    h[8..16].copy_from_slice(&first_index.to_le_bytes());
    h[16..24].copy_from_slice(&file_len.to_le_bytes());
    let units = u32::try_from(seg_size / SIZE_UNIT).unwrap_or(u32::MAX);
    h[24..28].copy_from_slice(&units.to_le_bytes());
    let crc = crc32c::crc32c(&h[..28]);
    h[28..].copy_from_slice(&crc.to_le_bytes());
    h
}

/// A segment header, or why it is invalid.
pub(crate) fn decode_header(d: &[u8]) -> Result<Header, &'static str> {
    if d.len() < HEADER_LEN {
        return Err("shorter than a segment header");
    }
    if d[..8] != MAGIC {
        return Err("not a mmapkit log segment (bad magic)");
    }
    if crc32c::crc32c(&d[..28]) != u32_at(d, 28) {
        return Err("segment header checksum mismatch");
    }
    let nz = |v: u64| (v != 0).then_some(v);
    Ok(Header {
        first: u64_at(d, 8),
        file_len: nz(u64_at(d, 16)),
        seg_size: nz(u32_at(d, 24) as u64 * SIZE_UNIT),
    })
}

/// Zeros for padding.
pub(crate) const PAD: [u8; 16] = [0; 16];

/// Initial CRC state for the entry at `index`: the same bytes at another
/// index do not validate.
#[inline]
fn seed(index: u64) -> u32 {
    (index as u32) ^ ((index >> 32) as u32).rotate_left(16) ^ 0x6d6d_6b6c
}

/// Payload length of the frame at `pos`.
#[inline]
pub(crate) fn len_at(d: &[u8], pos: usize) -> usize {
    u32_at(d, pos + 4) as usize
}

/// Appends the frame of an entry (index, term, payload) to `buf` and
/// returns its CRC (also stored in the frame).
#[inline]
pub(crate) fn encode_entry(buf: &mut Vec<u8>, index: u64, term: u64, payload: &[u8]) -> u32 {
    let start = buf.len();
    buf.extend_from_slice(&[0; 4]);
    buf.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    buf.extend_from_slice(&term.to_le_bytes());
    buf.extend_from_slice(payload);
    buf.extend_from_slice(&PAD[..padded(payload.len()) - payload.len()]);
    let crc = crc32c::crc32c_append(seed(index), &buf[start + 4..]);
    buf[start..start + 4].copy_from_slice(&crc.to_le_bytes());
    crc
}

/// [`encode_entry`] with its CRC already known (see
/// `CommitLog::append_with_crcs`).
#[inline]
pub(crate) fn encode_entry_with_crc(buf: &mut Vec<u8>, crc: u32, term: u64, payload: &[u8]) -> u32 {
    buf.extend_from_slice(&crc.to_le_bytes());
    buf.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    buf.extend_from_slice(&term.to_le_bytes());
    buf.extend_from_slice(payload);
    buf.extend_from_slice(&PAD[..padded(payload.len()) - payload.len()]);
    crc
}

/// The CRC32C the log stores with an entry of `payload` at `index` with
/// `term` ([`Entry::crc`](super::Entry::crc) returns the stored one): a
/// copy received from elsewhere (a follower) is checked with it before it
/// is appended. Seeded from the index, over the length, term, payload and
/// zero padding to 16 bytes, as in the frame.
pub fn entry_crc(index: u64, term: u64, payload: &[u8]) -> u32 {
    let mut head = [0u8; 12];
    head[..4].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    head[4..].copy_from_slice(&term.to_le_bytes());
    let c = crc32c::crc32c_append(seed(index), &head);
    let c = crc32c::crc32c_append(c, payload);
    crc32c::crc32c_append(c, &PAD[..padded(payload.len()) - payload.len()])
}

/// CRC computed over the frame stored at `pos` (the caller checked that
/// the padded frame fits in `d`).
#[inline]
pub(crate) fn frame_crc(d: &[u8], pos: usize, index: u64) -> u32 {
    let len = len_at(d, pos);
    crc32c::crc32c_append(seed(index), &d[pos + 4..pos + REC + padded(len)])
}

/// Whether the frame at `pos` holds the CRC it should at `index`.
#[inline]
pub(crate) fn frame_ok(d: &[u8], pos: usize, index: u64) -> bool {
    frame_crc(d, pos, index) == u32_at(d, pos)
}

/// Appends the commit record of a batch (first index, epoch, durable
/// watermark, the entries' CRCs) to `buf`.
pub(crate) fn encode_commit(
    buf: &mut Vec<u8>,
    first: u64,
    epoch: u32,
    watermark: u64,
    crcs: &[u32],
) {
    let count = crcs.len() as u32;
    let mut c = CommitCrc::new(first, count, epoch, Some(watermark));
    // In chunks through a stack buffer: one CRC call per 64 entries.
    let mut tmp = [0u8; 256];
    for chunk in crcs.chunks(64) {
        for (t, x) in tmp.chunks_exact_mut(4).zip(chunk) {
            t.copy_from_slice(&x.to_le_bytes());
        }
        c.0 = crc32c::crc32c_append(c.0, &tmp[..chunk.len() * 4]);
    }
    buf.extend_from_slice(&c.record_wm(count, epoch, watermark));
}

/// Running CRC of a commit record; feed it each entry's CRC in order.
#[derive(Clone, Copy)]
pub(crate) struct CommitCrc(u32);

impl CommitCrc {
    /// `watermark`: `None` for a 16-byte record without one.
    pub(crate) fn new(first: u64, count: u32, epoch: u32, watermark: Option<u64>) -> Self {
        let mut pre = [0u8; 24];
        pre[..8].copy_from_slice(&first.to_le_bytes());
        pre[8..12].copy_from_slice(&count.to_le_bytes());
        pre[12..16].copy_from_slice(&epoch.to_le_bytes());
        let n = match watermark {
            Some(w) => {
                pre[16..].copy_from_slice(&w.to_le_bytes());
                24
            }
            None => 16,
        };
        CommitCrc(crc32c::crc32c(&pre[..n]))
    }
    #[inline]
    pub(crate) fn add(&mut self, entry_crc: u32) {
        self.0 = crc32c::crc32c_append(self.0, &entry_crc.to_le_bytes());
    }
    pub(crate) fn record(self, count: u32, epoch: u32) -> [u8; REC] {
        let mut r = [0u8; REC];
        r[..4].copy_from_slice(&self.0.to_le_bytes());
        r[4..8].copy_from_slice(&COMMIT_MARK.to_le_bytes());
        r[8..12].copy_from_slice(&count.to_le_bytes());
        r[12..].copy_from_slice(&epoch.to_le_bytes());
        r
    }
    pub(crate) fn record_wm(self, count: u32, epoch: u32, watermark: u64) -> [u8; COMMIT_WM] {
        let mut r = [0u8; COMMIT_WM];
        r[..4].copy_from_slice(&self.0.to_le_bytes());
        r[4..8].copy_from_slice(&COMMIT_WM_MARK.to_le_bytes());
        r[8..12].copy_from_slice(&count.to_le_bytes());
        r[12..16].copy_from_slice(&epoch.to_le_bytes());
        r[16..24].copy_from_slice(&watermark.to_le_bytes());
        let rc = crc32c::crc32c(&r[..24]);
        r[24..28].copy_from_slice(&rc.to_le_bytes());
        r
    }
}

/// The 16-byte commit record (no watermark) for the batch whose entries
/// start at `offsets` (positions of entry headers in `d`), reading their
/// stored CRCs.
pub(crate) fn commit_for(d: &[u8], first: u64, offsets: &[u64], epoch: u32) -> [u8; REC] {
    let count = offsets.len() as u32;
    let mut c = CommitCrc::new(first, count, epoch, None);
    for &o in offsets {
        c.add(u32_at(d, o as usize));
    }
    c.record(count, epoch)
}

/// Whether the commit record at `pos` (of either kind, `len` bytes, in
/// `d`) is the one for the batch whose entries start at `offsets`.
fn commit_ok(d: &[u8], pos: usize, len: usize, first: u64, offsets: &[u64], epoch: u32) -> bool {
    if len == REC {
        return commit_for(d, first, offsets, epoch) == d[pos..pos + REC];
    }
    let Some(w) = record_watermark(d, pos) else {
        return false;
    };
    let count = offsets.len() as u32;
    let mut c = CommitCrc::new(first, count, epoch, Some(w));
    for &o in offsets {
        c.add(u32_at(d, o as usize));
    }
    c.record_wm(count, epoch, w) == d[pos..pos + COMMIT_WM]
}

/// Why a scan stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Stop {
    /// Zeros where the next record would be: the clean end of the data.
    Clean,
    /// The segment is full (or the expected number of entries was found).
    End,
    /// An entry whose CRC does not match (index, position).
    BadEntry(u64, usize),
    /// A record that is not a valid entry or commit (position).
    BadRecord(usize),
}

/// Result of scanning a segment's records.
#[derive(Debug)]
pub(crate) struct Scan {
    /// Header positions of the committed entries.
    pub offsets: Vec<u64>,
    /// Byte position just after the last committed record.
    pub end: usize,
    /// Epoch of the last committed batch (0 if none).
    pub epoch: u32,
    /// Committed batches.
    pub batches: u64,
    /// Lenient scans: the first entry whose CRC did not match.
    pub first_bad: Option<u64>,
    /// Entries seen after the last commit (a torn batch).
    pub pending: u64,
    /// Position where scanning stopped.
    pub stop_pos: usize,
    /// Why.
    pub stop: Stop,
}

/// Scans records of segment data `d` whose first entry is `first`, in a
/// file of generation `gen`. Stops after `limit` committed entries (sealed
/// segments know their count), at the end of the data, or at the first
/// record that does not validate. `lenient`: accept entries whose CRC
/// does not match as long as their batch's commit (computed from the
/// stored CRCs) does (used only to tell corruption from a torn tail).
pub(crate) fn scan(d: &[u8], first: u64, gen: u32, limit: Option<u64>, lenient: bool) -> Scan {
    scan_at(d, HEADER_LEN, first, gen, limit, lenient)
}

/// [`scan`] from byte `start`, where entry `first` is expected.
pub(crate) fn scan_at(
    d: &[u8],
    start: usize,
    first: u64,
    gen: u32,
    limit: Option<u64>,
    lenient: bool,
) -> Scan {
    let mut s = Scan {
        offsets: Vec::new(),
        end: start,
        epoch: 0,
        batches: 0,
        first_bad: None,
        pending: 0,
        stop_pos: start,
        stop: Stop::End,
    };
    let mut committed = 0usize;
    let mut pos = start;
    let stop = loop {
        if limit.is_some_and(|l| committed as u64 >= l) {
            break Stop::End;
        }
        if pos + REC > d.len() {
            break Stop::End;
        }
        let len = u32_at(d, pos + 4);
        if let Some(clen) = commit_len(d, pos) {
            let count = u32_at(d, pos + 8);
            let epoch = u32_at(d, pos + 12);
            let pend = &s.offsets[committed..];
            let batch_first = first + committed as u64;
            if pos + clen > d.len()
                || count as usize != pend.len()
                || pend.is_empty()
                || epoch < s.epoch
                || epoch > gen
                || !commit_ok(d, pos, clen, batch_first, pend, epoch)
                || limit.is_some_and(|l| (s.offsets.len() as u64) > l)
            {
                break Stop::BadRecord(pos);
            }
            pos += clen;
            committed = s.offsets.len();
            s.end = pos;
            s.epoch = epoch;
            s.batches += 1;
            continue;
        }
        if len == 0 && d[pos..pos + REC].iter().all(|&b| b == 0) {
            break Stop::Clean;
        }
        let len = len as usize;
        let size = frame_size(len);
        if len > MAX_ENTRY || pos + size > d.len() {
            break Stop::BadRecord(pos);
        }
        let index = first + s.offsets.len() as u64;
        if !frame_ok(d, pos, index) {
            if !lenient {
                break Stop::BadEntry(index, pos);
            }
            s.first_bad.get_or_insert(index);
        }
        s.offsets.push(pos as u64);
        pos += size;
    };
    s.pending = (s.offsets.len() - committed) as u64;
    s.offsets.truncate(committed);
    s.stop_pos = pos;
    s.stop = stop;
    s
}

/// Position just after entry `k` (its frame), given the entry offsets.
pub(crate) fn entry_end(d: &[u8], offsets: &[u64], k: usize) -> usize {
    let o = offsets[k] as usize;
    o + frame_size(len_at(d, o))
}

/// Start (entry number within the segment) of the batch containing entry
/// `k`: walk back while the previous entry ends exactly where the next
/// begins (a commit record sits between batches).
pub(crate) fn batch_start(d: &[u8], offsets: &[u64], k: usize) -> usize {
    let mut j = k;
    while j > 0 && entry_end(d, offsets, j - 1) == offsets[j] as usize {
        j -= 1;
    }
    j
}

/// What the bytes after the committed prefix of a tail segment are.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Tail {
    /// A clean end: the zero record (or the end of the file).
    Clean,
    /// One incomplete last batch: nonzero bytes up to `to` (the only batch
    /// that a crash can leave torn).
    Torn { to: usize },
    /// Damage followed by later data: never a torn tail.
    Corrupt { detail: String, to: usize },
}

/// Position just after the last nonzero byte at or after `from`, rounded
/// up to a record (at most `d.len()`).
pub(crate) fn data_end(d: &[u8], from: usize) -> usize {
    match d[from.min(d.len())..].iter().rposition(|&b| b != 0) {
        Some(i) => (from + i + 1).next_multiple_of(REC).min(d.len()),
        None => from,
    }
}

/// Classifies what follows the committed prefix `sc` (a strict scan of
/// segment `d`, first entry `first`, generation `gen`).
///
/// Batches are written whole, followed by a zero record, into preallocated
/// zeros (truncations zero what they cut). Damage from entry `i` on is a
/// torn tail unless something shows the damaged batch was durable before
/// a later one was written:
/// * a later commit record, intact by its own checksum, whose watermark is
///   `>= i` (the batch had been synced: corruption); records with a
///   watermark below `i` were written while it was unsynced, so a power
///   loss may have torn it out of order: still a torn tail. Watermarks
///   count only once a batch was written in the segment's current
///   generation: before that, the last change may be a truncation that a
///   crash interrupted while zeroing (in any sector order) what it cut;
/// * for older records without a watermark (only one batch could be in
///   flight, so damage followed by a later batch is corruption):
///   - its entries' stored CRCs still commit and later batches follow
///     (damaged payload);
///   - two or more commit records lie in the damaged area (the damaged
///     batch has only one);
///   - a valid batch starts right after the damaged record (its own commit
///     record was damaged).
pub(crate) fn classify_tail(d: &[u8], sc: &Scan, first: u64, gen: u32) -> Tail {
    let b = sc.end;
    let clean = match sc.stop {
        Stop::Clean => sc.pending == 0,
        Stop::End => sc.pending == 0 && d[sc.stop_pos.min(d.len())..].iter().all(|&x| x == 0),
        _ => false,
    };
    if clean {
        return Tail::Clean;
    }
    let to = data_end(d, b).max((b + REC).min(d.len()));
    let index = first + sc.offsets.len() as u64;
    let at = sc.stop_pos;
    // Commit-looking records in the damaged area: the mark, a count that
    // fits before it and an epoch that may follow the prefix.
    let plausible = |q: usize| {
        q + REC <= d.len()
            && (1..=((q - b) / REC) as u64).contains(&(u32_at(d, q + 8) as u64))
            && (sc.epoch..=gen).contains(&u32_at(d, q + 12))
    };
    let mut legacy = Vec::new();
    let mut covering = None;
    // Whether a batch was written since the segment's last new generation
    // (a truncation or recovery cut): until then the damage may be a cut
    // that a crash interrupted (its zeroing half done, the stale records
    // after it still there, watermarks and all): a torn tail.
    let mut fresh = sc.epoch == gen;
    for q in (b..to).step_by(REC) {
        if !plausible(q) {
            continue;
        }
        match u32_at(d, q + 4) {
            COMMIT_MARK => legacy.push(q),
            COMMIT_WM_MARK => {
                if let Some(w) = record_watermark(d, q) {
                    fresh |= u32_at(d, q + 12) == gen;
                    if w >= index && covering.is_none() {
                        covering = Some((q, w));
                    }
                }
            }
            _ => {}
        }
    }
    if let (Some((q, w)), true) = (covering, fresh) {
        return Tail::Corrupt {
            detail: format!(
                "the batch from entry {index} is damaged (byte {at}), but it was durable: \
                 the later commit record at byte {q} says entries up to {w} had been synced"
            ),
            to,
        };
    }
    if legacy.is_empty() {
        // Any later batch has a watermark below `index`: unsynced, torn.
        return Tail::Torn { to };
    }
    let lenient = scan(d, first, gen, None, true);
    if lenient.batches > sc.batches + 1 {
        return Tail::Corrupt {
            detail: format!(
                "entry {} fails its checksum and {} later batch(es) follow it",
                lenient.first_bad.unwrap_or(index),
                lenient.batches - sc.batches - 1
            ),
            to,
        };
    }
    if legacy.len() >= 2 {
        return Tail::Corrupt {
            detail: format!(
                "the batch from entry {index} is damaged (byte {at}) and later batches follow \
                 (commit records at bytes {} and {})",
                legacy[0], legacy[1]
            ),
            to,
        };
    }
    if at + REC < d.len() {
        let next = scan_at(d, at + REC, index + sc.pending, gen, None, false);
        if next.batches > 0 && next.epoch >= sc.epoch {
            return Tail::Corrupt {
                detail: format!(
                    "the commit record of the batch from entry {index} (byte {at}) is damaged \
                     and a later batch follows it"
                ),
                to,
            };
        }
    }
    Tail::Torn { to }
}
