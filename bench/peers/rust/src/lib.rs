//! Shared part of the `log` benchmark drivers (one binary per commit log).
//!
//! Protocol, the same for every driver (the Go ones in bench/peers/go too):
//!
//! ```text
//! DRIVER append --dir D --entries N --size S [--batch B] [--sync none|batch]
//!               [--appenders K] [--seed X]
//! DRIVER read   --dir D --entries N --size S [--batch B] [--seed X]
//! ```
//!
//! * `append` creates a log in the empty or missing directory D and appends N
//!   entries of S bytes, B per batch (one `append` call per batch), from K threads
//!   (thread t appends batches t, t+K, ...). With `--sync batch` every batch is
//!   durable (fdatasync or the log's equivalent) before its append returns. Timed:
//!   opening the log and all the appends. Then, untimed, it reads everything back
//!   like `read` does and reports the checksums, so the appended data is verified.
//! * `read` opens the existing log in D (timed separately: `open_s`) and reads the
//!   N entries back B at a time by index, copying each entry's bytes into one
//!   output buffer (what a Raft leader does when it builds a message): `read_s`.
//!
//! Output: one JSON object on stdout with `append_s`, `open_s`, `read_s` (seconds,
//! as measured by the driver), `syncs` (fdatasyncs or equivalent performed while
//! appending, as far as the driver can count them), `batches`, `entries`, `bytes`,
//! `crc` (CRC-32/IEEE of all entries' bytes in index order) and `batch_sum` (the
//! wrapping u64 sum of the CRC-32 of each group of B consecutive entries: equal to
//! the expected value whatever the order in which concurrent appenders' batches
//! landed, as long as every batch is whole and in order).
//!
//! Entry data: entry i (0-based) is bytes [i*S, (i+1)*S) of a stream of
//! little-endian u64 words, word k = splitmix64(seed + (k+1) * 0x9E3779B97F4A7C15)
//! (the suite computes the expected checksums from the same stream with numpy).
//! Every entry has term 1 where the log stores terms.

use std::path::PathBuf;
use std::time::Instant;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Append,
    Read,
}

#[derive(Debug, Clone)]
pub struct Args {
    pub phase: Phase,
    pub dir: PathBuf,
    pub entries: usize,
    pub size: usize,
    pub batch: usize,
    pub sync: bool,
    pub appenders: usize,
    pub seed: u64,
}

pub const TERM: u64 = 1;

fn usage(name: &str, msg: &str) -> ! {
    eprintln!("{name}: {msg}");
    eprintln!(
        "usage: {name} append|read --dir D --entries N --size S [--batch B] \
         [--sync none|batch] [--appenders K] [--seed X]"
    );
    std::process::exit(2)
}

impl Args {
    pub fn parse() -> Args {
        let argv: Vec<String> = std::env::args().collect();
        let name = argv.first().cloned().unwrap_or_default();
        let phase = match argv.get(1).map(String::as_str) {
            Some("append") => Phase::Append,
            Some("read") => Phase::Read,
            _ => usage(&name, "expected `append` or `read`"),
        };
        let mut a = Args {
            phase,
            dir: PathBuf::new(),
            entries: 0,
            size: 0,
            batch: 10,
            sync: false,
            appenders: 1,
            seed: 1,
        };
        let mut it = argv[2..].iter();
        while let Some(flag) = it.next() {
            let v = it
                .next()
                .unwrap_or_else(|| usage(&name, &format!("{flag} needs a value")));
            let num = || -> u64 {
                v.parse()
                    .unwrap_or_else(|_| usage(&name, &format!("{flag}: not a number: {v}")))
            };
            match flag.as_str() {
                "--dir" => a.dir = PathBuf::from(v),
                "--entries" => a.entries = num() as usize,
                "--size" => a.size = num() as usize,
                "--batch" => a.batch = num() as usize,
                "--appenders" => a.appenders = num() as usize,
                "--seed" => a.seed = num(),
                "--sync" => {
                    a.sync = match v.as_str() {
                        "none" => false,
                        "batch" => true,
                        _ => usage(&name, "--sync is none or batch"),
                    }
                }
                _ => usage(&name, &format!("unknown option {flag}")),
            }
        }
        if a.dir.as_os_str().is_empty() || a.entries == 0 || a.size == 0 || a.batch == 0 {
            usage(&name, "--dir, --entries and --size are required (and > 0)");
        }
        if !a.entries.is_multiple_of(a.batch) || a.appenders == 0 {
            usage(
                &name,
                "--entries must be a multiple of --batch; --appenders >= 1",
            );
        }
        a
    }

    pub fn batches(&self) -> usize {
        self.entries / self.batch
    }

    /// Batches appended by appender `t` (0-based), in order.
    pub fn batches_of(&self, t: usize) -> impl Iterator<Item = usize> {
        (t..self.batches()).step_by(self.appenders)
    }
}

/// The entries' bytes: entry i is `data[i*size..(i+1)*size]`.
pub fn generate(seed: u64, nbytes: usize) -> Vec<u8> {
    const GOLD: u64 = 0x9E37_79B9_7F4A_7C15;
    let words = nbytes.div_ceil(8);
    let mut out = Vec::with_capacity(words * 8);
    for k in 0..words as u64 {
        let mut z = seed.wrapping_add((k + 1).wrapping_mul(GOLD));
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        out.extend_from_slice(&z.to_le_bytes());
    }
    out.truncate(nbytes);
    out
}

/// What a driver measured; printed as JSON by [`Report::print`].
#[derive(Debug, Default, Clone)]
pub struct Report {
    pub append_s: f64,
    pub open_s: f64,
    pub read_s: f64,
    pub syncs: u64,
    pub batches: u64,
    pub entries: u64,
    pub bytes: u64,
    pub crc: u32,
    pub batch_sum: u64,
}

impl Report {
    /// Fills in the checksums of the bytes read back (`out`, index order).
    pub fn checksums(&mut self, out: &[u8], size: usize, batch: usize) {
        self.entries = (out.len() / size) as u64;
        self.bytes = out.len() as u64;
        self.crc = crc32fast::hash(out);
        self.batch_sum = out
            .chunks(size * batch)
            .fold(0u64, |a, c| a.wrapping_add(crc32fast::hash(c) as u64));
    }

    pub fn print(&self, driver: &str) {
        println!(
            "{{\"driver\": \"{driver}\", \"append_s\": {:.9}, \"open_s\": {:.9}, \
             \"read_s\": {:.9}, \"syncs\": {}, \"batches\": {}, \"entries\": {}, \
             \"bytes\": {}, \"crc\": {}, \"batch_sum\": {}}}",
            self.append_s,
            self.open_s,
            self.read_s,
            self.syncs,
            self.batches,
            self.entries,
            self.bytes,
            self.crc,
            self.batch_sum
        );
    }
}

pub fn die(driver: &str, what: &str, err: impl std::fmt::Display) -> ! {
    eprintln!("{driver}: {what}: {err}");
    std::process::exit(1)
}

/// Copies the entries read back into `out`, checking how many there are.
pub struct Sink {
    pub out: Vec<u8>,
    pub count: usize,
}

impl Sink {
    /// Its pages are touched before the clock starts (as every driver's
    /// sink is): the copy into it is the same for every log, but the
    /// first-touch faults of a fresh 50 MB buffer (~12 k, ~half of reading
    /// 1 M x 50 B) are nobody's log.
    pub fn new(a: &Args) -> Sink {
        let n = a.entries * a.size;
        let mut out = Vec::with_capacity(n);
        out.resize(n, 0xA5);
        out.clear();
        Sink { out, count: 0 }
    }

    #[inline]
    pub fn push(&mut self, data: &[u8]) {
        self.out.extend_from_slice(data);
        self.count += 1;
    }
}

/// The entries in the form a log's API takes them, converted from the generated
/// bytes before the clock starts.
pub trait Prepare: Sized {
    fn prepare(a: &Args, data: Vec<u8>) -> Self;
}

/// Most logs take the generated bytes as they are.
impl Prepare for Vec<u8> {
    fn prepare(_a: &Args, data: Vec<u8>) -> Self {
        data
    }
}

/// The common driver flow, for the log under test.
pub trait Driver: Sized {
    const NAME: &'static str;
    type Input: Prepare;
    /// Creates (append) or opens (read) the log in `a.dir`.
    fn open(a: &Args, create: bool) -> Result<Self, String>;
    /// Appends all batches (from `a.appenders` threads) given all entries' bytes;
    /// returns the number of syncs performed.
    fn append_all(&self, a: &Args, input: &Self::Input) -> Result<u64, String>;
    /// Reads entries [lo, hi) (0-based positions: the log's own first index is the
    /// driver's business) into the sink.
    fn read_range(&mut self, lo: u64, hi: u64, sink: &mut Sink) -> Result<(), String>;
    /// Makes everything appended so far durable and closes the log (untimed).
    fn close(self) -> Result<(), String> {
        Ok(())
    }
}

fn read_back<D: Driver>(log: &mut D, a: &Args, rep: &mut Report) -> Result<(), String> {
    let mut sink = Sink::new(a);
    let t = Instant::now();
    let mut lo = 0u64;
    while lo < a.entries as u64 {
        let hi = lo + a.batch as u64;
        log.read_range(lo, hi, &mut sink)?;
        lo = hi;
    }
    rep.read_s = t.elapsed().as_secs_f64();
    if sink.count != a.entries {
        return Err(format!(
            "read back {} entries, expected {}",
            sink.count, a.entries
        ));
    }
    rep.checksums(&sink.out, a.size, a.batch);
    Ok(())
}

pub fn main<D: Driver>() {
    let a = Args::parse();
    let mut rep = Report {
        batches: a.batches() as u64,
        ..Default::default()
    };
    let mut run = || -> Result<Report, String> {
        match a.phase {
            Phase::Append => {
                if a.dir.exists()
                    && a.dir
                        .read_dir()
                        .map_err(|e| e.to_string())?
                        .next()
                        .is_some()
                {
                    return Err(format!("{} is not empty", a.dir.display()));
                }
                std::fs::create_dir_all(&a.dir).map_err(|e| e.to_string())?;
                let input = D::Input::prepare(&a, generate(a.seed, a.entries * a.size));
                let t = Instant::now();
                let mut log = D::open(&a, true)?;
                rep.syncs = log.append_all(&a, &input)?;
                rep.append_s = t.elapsed().as_secs_f64();
                drop(input);
                read_back(&mut log, &a, &mut rep)?;
                rep.read_s = 0.0; // not a measurement of reading a closed log
                log.close()?;
            }
            Phase::Read => {
                let t = Instant::now();
                let mut log = D::open(&a, false)?;
                rep.open_s = t.elapsed().as_secs_f64();
                read_back(&mut log, &a, &mut rep)?;
                log.close()?;
            }
        }
        Ok(rep.clone())
    };
    match run() {
        Ok(r) => r.print(D::NAME),
        Err(e) => die(D::NAME, &a.dir.display().to_string(), e),
    }
}

/// Runs `f(t)` for every appender t in its own thread (inline if there is one).
pub fn appenders<F>(a: &Args, f: F) -> Result<u64, String>
where
    F: Fn(usize) -> Result<u64, String> + Sync,
{
    if a.appenders == 1 {
        return f(0);
    }
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..a.appenders)
            .map(|t| {
                let f = &f;
                s.spawn(move || f(t))
            })
            .collect();
        hs.into_iter().try_fold(0u64, |acc, h| {
            Ok(acc + h.join().map_err(|_| "appender panicked".to_string())??)
        })
    })
}
