//! Test helpers: logs with known contents, raw HTTP, a faulty proxy.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use mmapkit::log::{CommitLog, LogOptions, SyncMode};

pub fn open(dir: &Path) -> CommitLog {
    CommitLog::open(dir, LogOptions::default().sync(SyncMode::Batch).segment_size(1 << 20)).unwrap()
}

pub fn open_ro(dir: &Path) -> CommitLog {
    CommitLog::open(dir, LogOptions::default().read_only(true)).unwrap()
}

/// Payload of entry `i` (sizes vary from 0 to ~40 KiB, so pages mix
/// coalesced and borrowed chunks).
pub fn payload(i: u64, salt: u8) -> Vec<u8> {
    let n = match i % 50 {
        0 => 40_000,
        1 => 0,
        k => (k * 37) as usize,
    };
    (0..n).map(|j| (i as usize * 31 + j) as u8 ^ salt).collect()
}

/// Appends entries `from..to` (term `term`) in batches of 100, then
/// syncs them (a server serves only durable entries by default).
pub fn fill(log: &CommitLog, from: u64, to: u64, term: u64, salt: u8) {
    fill_unsynced(log, from, to, term, salt);
    log.sync().unwrap();
}

/// [`fill`] without the sync: entries a power loss of the leader can take.
pub fn fill_unsynced(log: &CommitLog, from: u64, to: u64, term: u64, salt: u8) {
    assert_eq!(log.last_index() + 1, from);
    let mut i = from;
    while i < to {
        let hi = (i + 100).min(to);
        let ps: Vec<(u64, Vec<u8>)> = (i..hi).map(|k| (term, payload(k, salt))).collect();
        log.append(&ps).unwrap();
        i = hi;
    }
}

pub fn entries(log: &CommitLog) -> Vec<(u64, u64, Vec<u8>)> {
    if log.is_empty() {
        return Vec::new();
    }
    log.read(log.first_index(), log.last_index() + 1, None)
        .unwrap()
        .iter()
        .map(|e| (e.index(), e.term(), e.data().to_vec()))
        .collect()
}

/// Both logs hold the same entries (index, term, bytes), one by one.
pub fn assert_same(a: &Path, b: &Path) {
    let (x, y) = (entries(&open_ro(a)), entries(&open_ro(b)));
    assert_eq!(x.len(), y.len(), "entry counts differ");
    for (p, q) in x.iter().zip(&y) {
        assert!(p == q, "entry {} differs", p.0);
    }
}

/// `b`'s entries are a prefix of `a`'s.
pub fn assert_prefix(a: &Path, b: &Path) -> usize {
    let (x, y) = (entries(&open_ro(a)), entries(&open_ro(b)));
    assert!(y.len() <= x.len());
    for (p, q) in x.iter().zip(&y) {
        assert!(p == q, "entry {} differs", p.0);
    }
    y.len()
}

/// A raw HTTP/1.1 GET: (status, body).
pub fn http_get(addr: SocketAddr, path: &str, token: Option<&str>) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n{auth}Connection: close\r\n\r\n").unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    let text = String::from_utf8_lossy(&out).to_string();
    let status = text[9..12].parse().unwrap();
    let body = text.split_once("\r\n\r\n").map(|x| x.1.to_string()).unwrap_or_default();
    (status, body)
}

/// What the proxy does to server-to-client bytes.
#[derive(Clone, Copy)]
pub enum Fault {
    /// Cut each connection after a pseudo-random number of bytes (up to the given bound).
    Cut(u64),
    /// Flip a byte in the middle of every `application/octet-stream` body.
    Flip,
}

pub struct Proxy {
    pub addr: SocketAddr,
    pub connections: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        let _ = TcpStream::connect(self.addr);
    }
}

pub fn proxy(upstream: SocketAddr, fault: Fault) -> Proxy {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let connections = Arc::new(AtomicU64::new(0));
    let (st, conns) = (stop.clone(), connections.clone());
    std::thread::spawn(move || {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for c in l.incoming() {
            if st.load(Ordering::Acquire) {
                return;
            }
            let Ok(down) = c else { continue };
            let Ok(up) = TcpStream::connect(upstream) else {
                continue;
            };
            conns.fetch_add(1, Ordering::Relaxed);
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let (d2, u2) = (down.try_clone().unwrap(), up.try_clone().unwrap());
            std::thread::spawn(move || pipe(d2, u2, None));
            let cut = match fault {
                Fault::Cut(max) => Some(1 + seed % max),
                Fault::Flip => None,
            };
            std::thread::spawn(move || pipe_down(up, down, cut, matches!(fault, Fault::Flip)));
        }
    });
    Proxy { addr, connections, stop }
}

fn pipe(mut from: TcpStream, mut to: TcpStream, _: Option<u64>) {
    let mut buf = [0u8; 16384];
    while let Ok(n) = from.read(&mut buf) {
        if n == 0 || to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Both);
    let _ = from.shutdown(std::net::Shutdown::Both);
}

/// Server to client, with the fault.
fn pipe_down(mut from: TcpStream, mut to: TcpStream, cut: Option<u64>, flip: bool) {
    from.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut buf = vec![0u8; 16384];
    let mut sent = 0u64;
    // Response parsing for Flip: head bytes so far, or body left + flip offset.
    let mut head: Vec<u8> = Vec::new();
    let mut body_left: u64 = 0;
    let mut flip_at: Option<u64> = None;
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let data = &mut buf[..n];
        if flip {
            let mut k = 0;
            while k < data.len() {
                if body_left == 0 {
                    head.push(data[k]);
                    k += 1;
                    if head.ends_with(b"\r\n\r\n") {
                        let h = String::from_utf8_lossy(&head).to_ascii_lowercase();
                        let len: u64 = h
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .and_then(|v| v.trim().parse().ok())
                            .unwrap_or(0);
                        body_left = len;
                        flip_at =
                            (h.contains("application/octet-stream") && len > 0).then_some(len / 2);
                        head.clear();
                    }
                } else {
                    let take = (data.len() - k).min(body_left as usize);
                    if let Some(f) = flip_at {
                        // Offset from the end of the body.
                        let start_left = body_left;
                        let end_left = body_left - take as u64;
                        if f < start_left && f >= end_left {
                            let pos = k + (start_left - 1 - f) as usize;
                            data[pos] ^= 0x40;
                            flip_at = None;
                        }
                    }
                    body_left -= take as u64;
                    k += take;
                }
            }
        }
        if let Some(c) = cut {
            if sent + n as u64 >= c {
                let keep = (c - sent) as usize;
                let _ = to.write_all(&data[..keep]);
                break;
            }
        }
        if to.write_all(data).is_err() {
            break;
        }
        sent += n as u64;
    }
    let _ = to.shutdown(std::net::Shutdown::Both);
    let _ = from.shutdown(std::net::Shutdown::Both);
}

/// What [`router`] does to one answer.
#[derive(Clone, Copy, Debug)]
pub enum Alter {
    /// Pass it on as it is.
    Keep,
    /// Remove these headers.
    Strip(&'static [&'static str]),
    /// Set a header to a value.
    Set(&'static str, &'static str),
    /// Send the head and half the body, then close.
    CutBody,
    /// Ask for the page from this index instead (a page out of order).
    From(u64),
}

/// A proxy that sends each request (one per upstream connection) to the
/// upstream `route` picks for its path, altered as it says; the counter
/// counts the requests altered (anything but `Alter::Keep`).
pub fn router(
    route: impl Fn(&str) -> (SocketAddr, Alter) + Send + Sync + 'static,
) -> (Proxy, Arc<AtomicU64>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let connections = Arc::new(AtomicU64::new(0));
    let altered = Arc::new(AtomicU64::new(0));
    let (st, conns, alt) = (stop.clone(), connections.clone(), altered.clone());
    let route = Arc::new(route);
    std::thread::spawn(move || {
        for c in l.incoming() {
            if st.load(Ordering::Acquire) {
                return;
            }
            let Ok(down) = c else { continue };
            conns.fetch_add(1, Ordering::Relaxed);
            let (route, alt) = (route.clone(), alt.clone());
            std::thread::spawn(move || {
                let _ = route_one(down, &*route, &alt);
            });
        }
    });
    (Proxy { addr, connections, stop }, altered)
}

fn route_one(
    mut down: TcpStream,
    route: &dyn Fn(&str) -> (SocketAddr, Alter),
    altered: &AtomicU64,
) -> std::io::Result<()> {
    // One request: its head (the follower sends no bodies).
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if down.read(&mut b)? == 0 {
            return Ok(());
        }
        head.push(b[0]);
    }
    let text = String::from_utf8_lossy(&head).to_string();
    let path = text.split(' ').nth(1).unwrap_or("").to_string();
    let (to, alter) = route(&path);
    if !matches!(alter, Alter::Keep) {
        altered.fetch_add(1, Ordering::Relaxed);
    }
    let mut up = TcpStream::connect(to)?;
    let mut head = text.replacen("\r\n", "\r\nConnection: close\r\n", 1);
    if let Alter::From(i) = alter {
        let from = path.split(['?', '&']).find(|kv| kv.starts_with("from=")).unwrap_or("from=");
        head = head.replacen(from, &format!("from={i}"), 1);
    }
    up.write_all(head.as_bytes())?;
    let mut answer = Vec::new();
    up.read_to_end(&mut answer)?;
    let split = answer.windows(4).position(|w| w == b"\r\n\r\n").map_or(answer.len(), |p| p + 4);
    let (h, body) = answer.split_at(split);
    let mut lines: Vec<String> =
        String::from_utf8_lossy(h).trim_end().split("\r\n").map(str::to_owned).collect();
    let named = |l: &str, n: &str| l.to_ascii_lowercase().starts_with(&format!("{n}:"));
    match alter {
        Alter::Strip(names) => lines.retain(|l| !names.iter().any(|n| named(l, n))),
        Alter::Set(n, v) => {
            lines.retain(|l| !named(l, n));
            lines.push(format!("{n}: {v}"));
        }
        Alter::Keep | Alter::CutBody | Alter::From(_) => {}
    }
    let h = format!("{}\r\n\r\n", lines.join("\r\n"));
    down.write_all(h.as_bytes())?;
    let body = if matches!(alter, Alter::CutBody) { &body[..body.len() / 2] } else { body };
    down.write_all(body)?;
    let _ = down.shutdown(std::net::Shutdown::Both);
    Ok(())
}

/// Copies the files of a log directory (what a leader's disk holds once
/// its power is lost right after a sync: the copy is taken then).
pub fn copy_dir(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).unwrap();
    for e in std::fs::read_dir(src).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_file() {
            std::fs::copy(e.path(), dst.join(e.file_name())).unwrap();
        }
    }
}

/// Replaces the log directory `dir` by `backup` (the power loss).
pub fn restore(backup: &Path, dir: &Path) {
    std::fs::remove_dir_all(dir).unwrap();
    copy_dir(backup, dir);
}
