//! The standard-I/O baseline of the `log` suite: a log in one file written with
//! `pwrite` and read with `pread`, with the same framing as mmapkit's log: every
//! entry is `len u32 | crc32c u32 | term u64 | data`, every batch ends with a commit
//! record `magic u32 | count u32 | crc32c of the batch's entry bytes u32 | 0 u32`;
//! one `pwrite` per batch from a reused buffer, `fdatasync` per batch in sync mode;
//! the index (entry -> offset, length) lives in memory and is rebuilt on open by
//! scanning the file and checking every CRC. Concurrent appenders take a mutex
//! around write + sync (no group commit: the plain way).
//!
//! Also `log-baseline probe --dir D --batches M`: the disk's fdatasync limit, M
//! times a 4 KiB `pwrite` + `fdatasync` (block after block of a file written and
//! synced beforehand, so only data is flushed; prints `append_s`, `syncs`).
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::sync::Mutex;
use std::time::Instant;

use log_bench_drivers::{appenders, main as run, Args, Driver, Report, Sink, TERM};

const HDR: usize = 16;
const COMMIT: usize = 16;
const MAGIC: u32 = 0xC0_33_17_ED;

struct State {
    end: u64,
    index: Vec<(u64, u32)>, // data offset, length
    syncs: u64,
}

struct Baseline {
    file: File,
    sync: bool,
    state: Mutex<State>,
    rbuf: Vec<u8>,
}

fn scan(bytes: &[u8]) -> Result<Vec<(u64, u32)>, String> {
    let mut index = Vec::new();
    let mut pos = 0usize;
    let mut batch_start = 0usize;
    let mut pending = 0usize;
    let u32_at = |p: usize| u32::from_le_bytes(bytes[p..p + 4].try_into().unwrap());
    while pos + 8 <= bytes.len() {
        let a = u32_at(pos);
        if a == MAGIC {
            let count = u32_at(pos + 4) as usize;
            let crc = u32_at(pos + 8);
            if count != pending || crc32c::crc32c(&bytes[batch_start..pos]) != crc {
                return Err(format!("bad commit record at offset {pos}"));
            }
            pending = 0;
            pos += COMMIT;
            batch_start = pos;
            continue;
        }
        let len = a as usize;
        let data = pos + HDR;
        if data + len > bytes.len() || crc32c::crc32c(&bytes[data..data + len]) != u32_at(pos + 4) {
            return Err(format!("bad entry at offset {pos}"));
        }
        index.push((data as u64, len as u32));
        pending += 1;
        pos = data + len;
    }
    // a torn last batch (no commit record) is dropped
    index.truncate(index.len() - pending);
    Ok(index)
}

impl Driver for Baseline {
    const NAME: &'static str = "baseline";
    type Input = Vec<u8>;

    fn open(a: &Args, create: bool) -> Result<Self, String> {
        let path = a.dir.join("log");
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .open(&path)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let (end, index) = if create {
            (0, Vec::with_capacity(a.entries))
        } else {
            let bytes = std::fs::read(&path).map_err(|e| e.to_string())?;
            let index = scan(&bytes)?;
            (bytes.len() as u64, index)
        };
        Ok(Baseline {
            file,
            sync: a.sync,
            state: Mutex::new(State {
                end,
                index,
                syncs: 0,
            }),
            rbuf: Vec::new(),
        })
    }

    fn append_all(&self, a: &Args, data: &Vec<u8>) -> Result<u64, String> {
        appenders(a, |t| {
            let mut local = Vec::with_capacity(a.batch * (HDR + a.size) + COMMIT);
            for b in a.batches_of(t) {
                let first = b * a.batch;
                // encode outside the lock, into this appender's reused buffer
                local.clear();
                for i in first..first + a.batch {
                    let d = &data[i * a.size..(i + 1) * a.size];
                    local.extend_from_slice(&(d.len() as u32).to_le_bytes());
                    local.extend_from_slice(&crc32c::crc32c(d).to_le_bytes());
                    local.extend_from_slice(&TERM.to_le_bytes());
                    local.extend_from_slice(d);
                }
                let crc = crc32c::crc32c(&local);
                local.extend_from_slice(&MAGIC.to_le_bytes());
                local.extend_from_slice(&(a.batch as u32).to_le_bytes());
                local.extend_from_slice(&crc.to_le_bytes());
                local.extend_from_slice(&0u32.to_le_bytes());
                let mut st = self.state.lock().unwrap();
                let end = st.end;
                self.file
                    .write_all_at(&local, end)
                    .map_err(|e| e.to_string())?;
                if self.sync {
                    self.file.sync_data().map_err(|e| e.to_string())?;
                    st.syncs += 1;
                }
                let mut off = end + HDR as u64;
                for _ in 0..a.batch {
                    st.index.push((off, a.size as u32));
                    off += (HDR + a.size) as u64;
                }
                st.end = end + local.len() as u64;
            }
            Ok(0)
        })?;
        let syncs = self.state.lock().unwrap().syncs;
        Ok(syncs)
    }

    fn read_range(&mut self, lo: u64, hi: u64, sink: &mut Sink) -> Result<(), String> {
        let st = self.state.get_mut().unwrap();
        let hi = hi.min(st.index.len() as u64) as usize;
        let lo = lo as usize;
        if lo >= hi {
            return Ok(());
        }
        let start = st.index[lo].0;
        let (last_off, last_len) = st.index[hi - 1];
        let len = (last_off + last_len as u64 - start) as usize;
        self.rbuf.resize(len, 0);
        self.file
            .read_exact_at(&mut self.rbuf, start)
            .map_err(|e| e.to_string())?;
        for &(off, n) in &st.index[lo..hi] {
            let p = (off - start) as usize;
            sink.push(&self.rbuf[p..p + n as usize]);
        }
        Ok(())
    }
}

fn probe() {
    // log-baseline probe --dir D --batches M
    let argv: Vec<String> = std::env::args().collect();
    let get = |flag: &str| {
        argv.iter()
            .position(|x| x == flag)
            .and_then(|i| argv.get(i + 1))
            .unwrap_or_else(|| {
                eprintln!("usage: log-baseline probe --dir D --batches M");
                std::process::exit(2)
            })
            .clone()
    };
    let dir = std::path::PathBuf::from(get("--dir"));
    let batches: u64 = get("--batches").parse().unwrap_or(0);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("probe");
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .unwrap_or_else(|e| log_bench_drivers::die("probe", &path.display().to_string(), e));
    // written and synced once before the clock starts, so that the timed fdatasyncs
    // flush data only (no block allocation or size change to journal): the floor
    let block = vec![0x5Au8; 4096];
    for i in 0..batches {
        f.write_all_at(&[0u8; 4096], i * 4096).unwrap();
    }
    f.sync_all().unwrap();
    let t = Instant::now();
    for i in 0..batches {
        f.write_all_at(&block, i * 4096).unwrap();
        f.sync_data().unwrap();
    }
    let rep = Report {
        append_s: t.elapsed().as_secs_f64(),
        syncs: batches,
        batches,
        ..Default::default()
    };
    rep.print("probe");
}

fn main() {
    if std::env::args().nth(1).as_deref() == Some("probe") {
        probe();
    } else {
        run::<Baseline>();
    }
}
