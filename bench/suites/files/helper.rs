// Helpers of the `files` benchmark (bench/suites/files/helper.py builds it with rustc -O).
//   count-lines FILE     the article's style: File + read() into a 64 KiB buffer,
//                        a plain loop over the bytes counting b'\n'
//   keep-first FILE      the article's std-I/O truncation: read the whole file,
//                        find the first newline, copy the first line, reopen the
//                        file for writing (truncating it) and write the line back
//   scan-mmap FILE THREADS  bandwidth reference: every thread maps its share of the
//                        file (MAP_POPULATE: no page faults) and sums it as u64 words
//   scan-read FILE THREADS  the same with pread into a 256 KiB buffer per thread
//                        (both print the wrapping sum of the file's u64 words plus
//                        its trailing bytes, so they check each other)
//   copy SRC DST         the write limit of a rewrite: a plain copy of SRC to a new
//                        file DST (O_EXCL) the way a fast copier does it, then fsync:
//                        copy_file_range in 64 MiB requests (cp's way: no copy
//                        through user space), or with --rw read/write through one
//                        1 MiB buffer (dd bs=1M); prints the bytes copied
//   rss CMD ARGS...      runs CMD (stdio inherited), then appends its peak RSS as
//                        "\nfiles-helper-maxrss-kib: N" to stderr and exits with its
//                        status. A child's ru_maxrss includes the memory of the
//                        process that spawned it (the mm it had before exec), so a
//                        child of the Python harness would report >= Python's peak;
//                        a child of this small program reports its own.
use std::fs::File;
use std::io::{Read, Write};
use std::os::raw::{c_int, c_void};
use std::os::unix::io::AsRawFd;

extern "C" {
    fn mmap(addr: *mut c_void, len: usize, prot: c_int, flags: c_int, fd: c_int, off: i64) -> *mut c_void;
    fn munmap(addr: *mut c_void, len: usize) -> c_int;
    // struct rusage: two struct timeval (2 x i64 each), then ru_maxrss and 13 more longs
    fn copy_file_range(fd_in: c_int, off_in: *mut i64, fd_out: c_int, off_out: *mut i64,
                       len: usize, flags: u32) -> isize;
    fn wait4(pid: c_int, status: *mut c_int, options: c_int, rusage: *mut [i64; 18]) -> c_int;
}

fn rss(cmd: &[String]) -> ! {
    let child = match std::process::Command::new(&cmd[0]).args(&cmd[1..]).spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("files-helper: {}: {e}", cmd[0]);
            std::process::exit(127);
        }
    };
    let (mut status, mut usage) = (0 as c_int, [0i64; 18]);
    if unsafe { wait4(child.id() as c_int, &mut status, 0, &mut usage) } < 0 {
        eprintln!("files-helper: wait4: {}", std::io::Error::last_os_error());
        std::process::exit(126);
    }
    std::mem::forget(child); // reaped above
    eprintln!("\nfiles-helper-maxrss-kib: {}", usage[4]);
    let code = if status & 0x7f == 0 { (status >> 8) & 0xff } else { 128 + (status & 0x7f) };
    std::process::exit(code)
}

fn count_lines(path: &str) -> std::io::Result<u64> {
    let mut f = File::open(path)?;
    let mut buf = vec![0u8; 64 * 1024];
    let mut count = 0u64;
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            return Ok(count);
        }
        for &b in &buf[..n] {
            if b == b'\n' {
                count += 1;
            }
        }
    }
}

fn keep_first(path: &str) -> std::io::Result<u64> {
    let mut contents = Vec::new();
    File::open(path)?.read_to_end(&mut contents)?;
    let ix = contents.iter().position(|&x| x == b'\n').unwrap_or(contents.len().saturating_sub(1));
    let truncated = contents[..=ix.min(contents.len().saturating_sub(1))].to_vec();
    drop(contents);
    let mut f = File::create(path)?;
    f.write_all(&truncated)?;
    Ok(truncated.len() as u64)
}

fn copy(src: &str, dst: &str, rw: bool) -> std::io::Result<u64> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut from = File::open(src)?;
    let mut to = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o644).open(dst)?;
    let mut total = 0u64;
    if rw {
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = from.read(&mut buf)?;
            if n == 0 {
                break;
            }
            to.write_all(&buf[..n])?;
            total += n as u64;
        }
    } else {
        loop {
            let n = unsafe {
                copy_file_range(from.as_raw_fd(), std::ptr::null_mut(), to.as_raw_fd(),
                                std::ptr::null_mut(), 64 << 20, 0)
            };
            if n < 0 {
                return Err(std::io::Error::last_os_error());
            }
            if n == 0 {
                break;
            }
            total += n as u64;
        }
    }
    to.sync_all()?;
    Ok(total)
}

fn sum_bytes(b: &[u8]) -> u64 {
    // whole u64 words (native endianness), then any trailing bytes one by one
    let words = b.len() / 8;
    let w: &[u64] = unsafe { std::slice::from_raw_parts(b.as_ptr() as *const u64, words) };
    let mut sum = if b.as_ptr() as usize % 8 == 0 {
        w.iter().fold(0u64, |a, &x| a.wrapping_add(x))
    } else {
        b[..words * 8].chunks_exact(8)
            .fold(0u64, |a, c| a.wrapping_add(u64::from_ne_bytes(c.try_into().unwrap())))
    };
    for &x in &b[words * 8..] {
        sum = sum.wrapping_add(x as u64);
    }
    sum
}

fn chunks(len: u64, threads: usize) -> Vec<(u64, u64)> {
    let page = 1u64 << 16; // chunk starts: multiples of 64 KiB (page- and word-aligned)
    let per = ((len + threads as u64 - 1) / threads.max(1) as u64 + page - 1) / page * page;
    let mut v = Vec::new();
    let mut off = 0;
    while off < len {
        v.push((off, per.min(len - off)));
        off += per;
    }
    v
}

fn scan(path: &str, threads: usize, mapped: bool) -> std::io::Result<u64> {
    use std::os::unix::fs::FileExt;
    let f = File::open(path)?;
    let len = f.metadata()?.len();
    let f = &f;
    std::thread::scope(|s| {
        let hs: Vec<_> = chunks(len, threads)
            .into_iter()
            .map(|(off, n)| {
                s.spawn(move || -> std::io::Result<u64> {
                    if mapped {
                        const MAP_SHARED: c_int = 1;
                        const MAP_POPULATE: c_int = 0x8000;
                        let p = unsafe {
                            mmap(std::ptr::null_mut(), n as usize, 1, MAP_SHARED | MAP_POPULATE,
                                 f.as_raw_fd(), off as i64)
                        };
                        if p as isize == -1 {
                            return Err(std::io::Error::last_os_error());
                        }
                        let b = unsafe { std::slice::from_raw_parts(p as *const u8, n as usize) };
                        let sum = sum_bytes(b);
                        unsafe { munmap(p, n as usize) };
                        Ok(sum)
                    } else {
                        let mut buf = vec![0u64; 32 * 1024]; // 256 KiB, u64-aligned
                        let buf: &mut [u8] = unsafe {
                            std::slice::from_raw_parts_mut(buf.as_mut_ptr() as *mut u8, buf.len() * 8)
                        };
                        let (mut sum, mut pos, end) = (0u64, off, off + n);
                        while pos < end {
                            let want = buf.len().min((end - pos) as usize);
                            f.read_exact_at(&mut buf[..want], pos)?;
                            sum = sum.wrapping_add(sum_bytes(&buf[..want]));
                            pos += want as u64;
                        }
                        Ok(sum)
                    }
                })
            })
            .collect();
        hs.into_iter().try_fold(0u64, |a, h| Ok(a.wrapping_add(h.join().unwrap()?)))
    })
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(|s| s.as_str()) == Some("rss") && args.len() > 2 {
        rss(&args[2..]);
    }
    let r = match (args.get(1).map(|s| s.as_str()), args.get(2)) {
        (Some("count-lines"), Some(p)) => count_lines(p),
        (Some("keep-first"), Some(p)) => keep_first(p),
        (Some("copy"), Some(p)) if args.len() >= 4 => {
            copy(p, &args[3], args.get(4).map(|s| s.as_str()) == Some("--rw"))
        }
        (Some(m @ ("scan-mmap" | "scan-read")), Some(p)) => {
            scan(p, args.get(3).and_then(|t| t.parse().ok()).unwrap_or(1), m == "scan-mmap")
        }
        _ => {
            eprintln!("usage: files-helper count-lines|keep-first|scan-mmap|scan-read FILE [THREADS] | copy SRC DST [--rw]");
            std::process::exit(2);
        }
    };
    match r {
        Ok(n) => println!("{n}"),
        Err(e) => {
            eprintln!("files-helper: {}: {e}", args[2]);
            std::process::exit(2);
        }
    }
}
