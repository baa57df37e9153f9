//! The in-memory file system: what reads see (`cur`) and what a power
//! loss would leave (`dur`), per inode.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{OsStr, OsString};
use std::fs;
use std::io;
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::path::Path;

pub(crate) const PAGE: u64 = 4096;
pub(crate) const SECTOR: u64 = 512;
pub(crate) const ROOT: u64 = 1;

/// Sparse file contents: absent pages read as zeros.
#[derive(Clone, Default, Debug)]
pub(crate) struct Data {
    pub size: u64,
    pages: BTreeMap<u64, Box<[u8]>>,
}

impl Data {
    pub fn read(&self, off: u64, len: usize) -> Vec<u8> {
        let end = (off + len as u64).min(self.size);
        if off >= end {
            return Vec::new();
        }
        let mut out = vec![0u8; (end - off) as usize];
        let mut p = off;
        while p < end {
            let (pi, po) = (p / PAGE, p % PAGE);
            let n = (PAGE - po).min(end - p);
            if let Some(pg) = self.pages.get(&pi) {
                let at = (p - off) as usize;
                out[at..at + n as usize].copy_from_slice(&pg[po as usize..(po + n) as usize]);
            }
            p += n;
        }
        out
    }

    /// Writes `buf` at `off`, growing the file; returns the sectors touched.
    pub fn write(&mut self, off: u64, buf: &[u8]) -> std::ops::Range<u64> {
        let end = off + buf.len() as u64;
        let mut p = off;
        while p < end {
            let (pi, po) = (p / PAGE, p % PAGE);
            let n = (PAGE - po).min(end - p);
            let pg =
                self.pages.entry(pi).or_insert_with(|| vec![0u8; PAGE as usize].into_boxed_slice());
            let at = (p - off) as usize;
            pg[po as usize..(po + n) as usize].copy_from_slice(&buf[at..at + n as usize]);
            p += n;
        }
        self.size = self.size.max(end);
        off / SECTOR..end.div_ceil(SECTOR)
    }

    /// Sets the size; bytes past a shrink are gone (a later grow reads zeros).
    pub fn set_size(&mut self, size: u64) {
        if size < self.size {
            self.pages.retain(|&pi, _| pi * PAGE < size);
            if !size.is_multiple_of(PAGE) {
                if let Some(pg) = self.pages.get_mut(&(size / PAGE)) {
                    pg[(size % PAGE) as usize..].fill(0);
                }
            }
        }
        self.size = size;
    }

    /// Zeroes `off..off+len` within the file (a punched hole).
    pub fn zero(&mut self, off: u64, len: u64) -> std::ops::Range<u64> {
        let end = (off + len).min(self.size);
        let mut p = off;
        while p < end {
            let (pi, po) = (p / PAGE, p % PAGE);
            let n = (PAGE - po).min(end - p);
            if let Some(pg) = self.pages.get_mut(&pi) {
                pg[po as usize..(po + n) as usize].fill(0);
            }
            p += n;
        }
        off / SECTOR..end.max(off).div_ceil(SECTOR)
    }

    fn write_to(&self, path: &Path, perm: u16) -> io::Result<()> {
        let f = fs::File::create(path)?;
        for (&pi, pg) in &self.pages {
            let at = pi * PAGE;
            if at >= self.size {
                break;
            }
            let n = (self.size - at).min(PAGE) as usize;
            f.write_all_at(&pg[..n], at)?;
        }
        f.set_len(self.size)?;
        f.set_permissions(fs::Permissions::from_mode(perm as u32))?;
        Ok(())
    }

    fn load(path: &Path) -> io::Result<Data> {
        let f = fs::File::open(path)?;
        let size = f.metadata()?.len();
        let mut d = Data { size, pages: BTreeMap::new() };
        let mut buf = vec![0u8; PAGE as usize];
        let mut at = 0;
        while at < size {
            let n = (size - at).min(PAGE) as usize;
            f.read_exact_at(&mut buf[..n], at)?;
            if buf[..n].iter().any(|&b| b != 0) {
                let mut pg = vec![0u8; PAGE as usize];
                pg[..n].copy_from_slice(&buf[..n]);
                d.pages.insert(at / PAGE, pg.into_boxed_slice());
            }
            at += PAGE;
        }
        Ok(d)
    }
}

#[derive(Debug)]
pub(crate) enum Kind {
    File {
        cur: Data,
        dur: Data,
        /// Sectors written (or zeroed) since the last fsync.
        dirty: BTreeSet<u64>,
    },
    Dir {
        cur: BTreeMap<OsString, u64>,
        dur: BTreeMap<OsString, u64>,
        parent: u64,
    },
}

#[derive(Debug)]
pub(crate) struct Inode {
    pub kind: Kind,
    pub perm: u16,
    pub dur_perm: u16,
    pub mtime: std::time::SystemTime,
}

/// What a crash keeps of the pending (unsynced) operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Nothing that was not synced: the pessimistic power loss.
    DropAll,
    /// A seeded random subset: each pending 512-byte sector of every file
    /// independently (so later writes may survive where earlier ones did
    /// not: torn and reordered), each file's pending size change, and each
    /// directory's pending entry changes (all or none per directory).
    KeepRandom {
        /// Seed of the choice (the same seed on the same state gives the same survivor).
        seed: u64,
    },
    /// Everything, as if the OS had written back all it had (what a clean
    /// unmount leaves).
    KeepAll,
}

/// splitmix64: small, seedable, good enough for picking subsets.
pub(crate) struct Rng(u64);
impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x6a09_e667_f3bc_c909)
    }
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    pub fn coin(&mut self) -> bool {
        self.next() & 1 == 1
    }
}

#[derive(Debug)]
pub(crate) struct Model {
    pub inodes: BTreeMap<u64, Inode>,
    next_ino: u64,
    /// fsync of a file also makes its own directory entries durable (ext4).
    pub own_entry_on_fsync: bool,
    /// (uid, gid) every inode reports: this process's.
    pub owner: (u32, u32),
}

pub(crate) type Res<T> = Result<T, i32>;

impl Model {
    /// Loads the backing directory: all of it is durable.
    pub fn load(backing: &Path, own_entry_on_fsync: bool) -> io::Result<Model> {
        let mut m = Model {
            inodes: BTreeMap::new(),
            next_ino: ROOT + 1,
            own_entry_on_fsync,
            owner: fs::metadata("/proc/self")
                .map(|m| {
                    (
                        std::os::unix::fs::MetadataExt::uid(&m),
                        std::os::unix::fs::MetadataExt::gid(&m),
                    )
                })
                .unwrap_or((0, 0)),
        };
        let perm = fs::metadata(backing)?.permissions().mode() as u16 & 0o7777;
        m.inodes.insert(ROOT, Inode::dir(ROOT, perm));
        m.load_dir(backing, ROOT)?;
        Ok(m)
    }

    fn load_dir(&mut self, dir: &Path, ino: u64) -> io::Result<()> {
        for ent in fs::read_dir(dir)? {
            let ent = ent?;
            let md = fs::symlink_metadata(ent.path())?;
            let perm = md.permissions().mode() as u16 & 0o7777;
            let child = self.next_ino;
            self.next_ino += 1;
            if md.is_dir() {
                self.inodes.insert(child, Inode::dir(ino, perm));
                self.load_dir(&ent.path(), child)?;
            } else if md.is_file() {
                let d = Data::load(&ent.path())?;
                let mut node = Inode::file(perm);
                if let Kind::File { cur, dur, .. } = &mut node.kind {
                    *cur = d.clone();
                    *dur = d;
                }
                self.inodes.insert(child, node);
            } else {
                return Err(io::Error::other(format!(
                    "{}: only regular files and directories are supported",
                    ent.path().display()
                )));
            }
            if let Kind::Dir { cur, dur, .. } = &mut self.inodes.get_mut(&ino).expect("dir").kind {
                cur.insert(ent.file_name(), child);
                dur.insert(ent.file_name(), child);
            }
        }
        Ok(())
    }

    pub fn node(&self, ino: u64) -> Res<&Inode> {
        self.inodes.get(&ino).ok_or(libc::ENOENT)
    }
    pub fn node_mut(&mut self, ino: u64) -> Res<&mut Inode> {
        self.inodes.get_mut(&ino).ok_or(libc::ENOENT)
    }

    pub fn entries(&self, dir: u64) -> Res<&BTreeMap<OsString, u64>> {
        match &self.node(dir)?.kind {
            Kind::Dir { cur, .. } => Ok(cur),
            Kind::File { .. } => Err(libc::ENOTDIR),
        }
    }
    fn entries_mut(&mut self, dir: u64) -> Res<&mut BTreeMap<OsString, u64>> {
        match &mut self.node_mut(dir)?.kind {
            Kind::Dir { cur, .. } => Ok(cur),
            Kind::File { .. } => Err(libc::ENOTDIR),
        }
    }

    pub fn lookup(&self, dir: u64, name: &OsStr) -> Res<u64> {
        self.entries(dir)?.get(name).copied().ok_or(libc::ENOENT)
    }

    pub fn create(&mut self, dir: u64, name: &OsStr, perm: u16, is_dir: bool) -> Res<u64> {
        if self.entries(dir)?.contains_key(name) {
            return Err(libc::EEXIST);
        }
        let ino = self.next_ino;
        self.next_ino += 1;
        let node = if is_dir { Inode::dir(dir, perm) } else { Inode::file(perm) };
        self.inodes.insert(ino, node);
        self.entries_mut(dir)?.insert(name.to_owned(), ino);
        Ok(ino)
    }

    /// A hard link (files only). The survivor holds a copy per name.
    pub fn link(&mut self, ino: u64, dir: u64, name: &OsStr) -> Res<()> {
        if matches!(self.node(ino)?.kind, Kind::Dir { .. }) {
            return Err(libc::EPERM);
        }
        if self.entries(dir)?.contains_key(name) {
            return Err(libc::EEXIST);
        }
        self.entries_mut(dir)?.insert(name.to_owned(), ino);
        Ok(())
    }

    pub fn unlink(&mut self, dir: u64, name: &OsStr, want_dir: bool) -> Res<()> {
        let ino = self.lookup(dir, name)?;
        match (&self.node(ino)?.kind, want_dir) {
            (Kind::Dir { cur, .. }, true) if !cur.is_empty() => return Err(libc::ENOTEMPTY),
            (Kind::Dir { .. }, false) => return Err(libc::EISDIR),
            (Kind::File { .. }, true) => return Err(libc::ENOTDIR),
            _ => {}
        }
        // The inode lives on (open handles, durable entries elsewhere).
        self.entries_mut(dir)?.remove(name);
        Ok(())
    }

    pub fn rename(
        &mut self,
        from: u64,
        name: &OsStr,
        to: u64,
        newname: &OsStr,
        noreplace: bool,
    ) -> Res<()> {
        let ino = self.lookup(from, name)?;
        if let Ok(old) = self.lookup(to, newname) {
            if noreplace {
                return Err(libc::EEXIST);
            }
            if old == ino {
                return Ok(());
            }
            match (&self.node(old)?.kind, &self.node(ino)?.kind) {
                (Kind::Dir { cur, .. }, Kind::Dir { .. }) if !cur.is_empty() => {
                    return Err(libc::ENOTEMPTY)
                }
                (Kind::Dir { .. }, Kind::File { .. }) => return Err(libc::EISDIR),
                (Kind::File { .. }, Kind::Dir { .. }) => return Err(libc::ENOTDIR),
                _ => {}
            }
        }
        self.entries_mut(from)?.remove(name);
        self.entries_mut(to)?.insert(newname.to_owned(), ino);
        if let Kind::Dir { parent, .. } = &mut self.node_mut(ino)?.kind {
            *parent = to;
        }
        Ok(())
    }

    pub fn file_mut(&mut self, ino: u64) -> Res<(&mut Data, &mut BTreeSet<u64>)> {
        let n = self.node_mut(ino)?;
        n.mtime = std::time::SystemTime::now();
        match &mut n.kind {
            Kind::File { cur, dirty, .. } => Ok((cur, dirty)),
            Kind::Dir { .. } => Err(libc::EISDIR),
        }
    }

    /// fsync/fdatasync of a file (msync(MS_SYNC) arrives as one): its data,
    /// size and mode become durable; with `own_entry_on_fsync`, also the
    /// names it currently has.
    pub fn sync_file(&mut self, ino: u64) -> Res<()> {
        let n = self.node_mut(ino)?;
        n.dur_perm = n.perm;
        match &mut n.kind {
            Kind::File { cur, dur, dirty } => {
                *dur = cur.clone();
                dirty.clear();
            }
            Kind::Dir { .. } => return self.sync_dir(ino),
        }
        if self.own_entry_on_fsync {
            for node in self.inodes.values_mut() {
                if let Kind::Dir { cur, dur, .. } = &mut node.kind {
                    for (name, &i) in cur.iter() {
                        if i == ino {
                            dur.insert(name.clone(), i);
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// A failed fsync of a file: its pending data and size are dropped
    /// (what survives is what was durable). `false` for a directory or a
    /// file with nothing pending (nothing to fail).
    pub fn drop_pending_data(&mut self, ino: u64) -> bool {
        match self.node_mut(ino).map(|n| &mut n.kind) {
            Ok(Kind::File { cur, dur, dirty }) if !dirty.is_empty() || cur.size != dur.size => {
                *cur = dur.clone();
                dirty.clear();
                true
            }
            _ => false,
        }
    }

    /// fsync of a directory: its entries (creates, renames, unlinks in it) become durable.
    pub fn sync_dir(&mut self, ino: u64) -> Res<()> {
        let n = self.node_mut(ino)?;
        n.dur_perm = n.perm;
        match &mut n.kind {
            Kind::Dir { cur, dur, .. } => {
                *dur = cur.clone();
                Ok(())
            }
            Kind::File { .. } => Err(libc::ENOTDIR),
        }
    }

    /// Pending operations: (files with unsynced data or size, directories with unsynced entries).
    pub fn pending(&self) -> (usize, usize) {
        let mut r = (0, 0);
        for n in self.inodes.values() {
            match &n.kind {
                Kind::File { cur, dur, dirty } => {
                    if !dirty.is_empty() || cur.size != dur.size {
                        r.0 += 1
                    }
                }
                Kind::Dir { cur, dur, .. } => {
                    if cur != dur {
                        r.1 += 1
                    }
                }
            }
        }
        r
    }

    /// Writes the state a power loss in `mode` leaves into the (emptied) directory `dest`.
    pub fn materialize(&self, mode: Mode, dest: &Path) -> io::Result<()> {
        for ent in fs::read_dir(dest)? {
            let p = ent?.path();
            if fs::symlink_metadata(&p)?.is_dir() {
                fs::remove_dir_all(&p)?;
            } else {
                fs::remove_file(&p)?;
            }
        }
        let mut rng = Rng::new(match mode {
            Mode::KeepRandom { seed } => seed,
            _ => 0,
        });
        // Decide every inode's surviving state first, in inode order, so
        // a seed means the same survivor whatever the tree walk does.
        let mut files: BTreeMap<u64, Data> = BTreeMap::new();
        let mut dirs: BTreeMap<u64, &BTreeMap<OsString, u64>> = BTreeMap::new();
        for (&ino, n) in &self.inodes {
            match (&n.kind, mode) {
                (Kind::File { dur, .. }, Mode::DropAll) => {
                    files.insert(ino, dur.clone());
                }
                (Kind::File { cur, .. }, Mode::KeepAll) => {
                    files.insert(ino, cur.clone());
                }
                (Kind::File { cur, dur, dirty }, Mode::KeepRandom { .. }) => {
                    let mut out = dur.clone();
                    if cur.size != dur.size && rng.coin() {
                        out.set_size(cur.size);
                    }
                    for &s in dirty {
                        let at = s * SECTOR;
                        if at < cur.size && rng.coin() {
                            let n = (cur.size - at).min(SECTOR) as usize;
                            out.write(at, &cur.read(at, n));
                        }
                    }
                    files.insert(ino, out);
                }
                (Kind::Dir { dur, .. }, Mode::DropAll) => {
                    dirs.insert(ino, dur);
                }
                (Kind::Dir { cur, .. }, Mode::KeepAll) => {
                    dirs.insert(ino, cur);
                }
                (Kind::Dir { cur, dur, .. }, Mode::KeepRandom { .. }) => {
                    dirs.insert(ino, if cur != dur && rng.coin() { cur } else { dur });
                }
            }
        }
        let perm = |ino: u64| {
            let n = &self.inodes[&ino];
            if mode == Mode::KeepAll {
                n.perm
            } else {
                n.dur_perm
            }
        };
        let mut seen = BTreeSet::new();
        let mut stack = vec![(ROOT, dest.to_owned())];
        while let Some((ino, path)) = stack.pop() {
            for (name, &child) in dirs[&ino] {
                let p = path.join(name);
                if let Some(d) = files.get(&child) {
                    d.write_to(&p, perm(child))?;
                } else if seen.insert(child) {
                    // A directory reachable twice (a half-durable move) appears once.
                    fs::create_dir(&p)?;
                    fs::set_permissions(&p, fs::Permissions::from_mode(perm(child) as u32))?;
                    stack.push((child, p));
                }
            }
        }
        Ok(())
    }
}

impl Inode {
    fn dir(parent: u64, perm: u16) -> Inode {
        Inode {
            kind: Kind::Dir { cur: BTreeMap::new(), dur: BTreeMap::new(), parent },
            perm,
            dur_perm: perm,
            mtime: std::time::SystemTime::now(),
        }
    }
    fn file(perm: u16) -> Inode {
        Inode {
            kind: Kind::File { cur: Data::default(), dur: Data::default(), dirty: BTreeSet::new() },
            perm,
            dur_perm: perm,
            mtime: std::time::SystemTime::now(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_write_read_truncate() {
        let mut d = Data::default();
        assert_eq!(d.write(4090, b"0123456789"), 7..9);
        assert_eq!(d.size, 4100);
        assert_eq!(d.read(4088, 20), b"\0\x000123456789".to_vec());
        d.set_size(4095);
        d.set_size(5000);
        assert_eq!(d.read(4090, 10), b"01234\0\0\0\0\0".to_vec());
        assert_eq!(d.read(0, 4), vec![0; 4]);
    }

    #[test]
    fn keep_random_keeps_whole_sectors_only() {
        let dir = tempfile::tempdir().unwrap();
        let mut m = Model::load(dir.path(), false).unwrap();
        let f = m.create(ROOT, OsStr::new("f"), 0o644, false).unwrap();
        m.sync_dir(ROOT).unwrap();
        m.file_mut(f).unwrap().0.write(0, &vec![1u8; 8192]);
        m.sync_file(f).unwrap();
        let (d, dirty) = m.file_mut(f).unwrap();
        let r = d.write(0, &vec![2u8; 8192]);
        dirty.extend(r);
        let mut mixed = false;
        for seed in 0..20 {
            m.materialize(Mode::KeepRandom { seed }, dir.path()).unwrap();
            let got = fs::read(dir.path().join("f")).unwrap();
            assert_eq!(got.len(), 8192);
            for s in got.chunks(512) {
                assert!(s.iter().all(|&b| b == s[0]), "torn inside a sector");
            }
            mixed |= got.contains(&1) && got.contains(&2);
        }
        assert!(mixed, "20 seeds never mixed old and new sectors");
        m.materialize(Mode::DropAll, dir.path()).unwrap();
        assert_eq!(fs::read(dir.path().join("f")).unwrap(), vec![1u8; 8192]);
        m.materialize(Mode::KeepAll, dir.path()).unwrap();
        assert_eq!(fs::read(dir.path().join("f")).unwrap(), vec![2u8; 8192]);
    }

    #[test]
    fn entries_are_durable_only_after_the_directory_sync() {
        let dir = tempfile::tempdir().unwrap();
        let mut m = Model::load(dir.path(), false).unwrap();
        let f = m.create(ROOT, OsStr::new("new"), 0o644, false).unwrap();
        m.sync_file(f).unwrap();
        m.materialize(Mode::DropAll, dir.path()).unwrap();
        assert!(!dir.path().join("new").exists(), "strict: a file fsync does not persist its name");
        m.sync_dir(ROOT).unwrap();
        m.rename(ROOT, OsStr::new("new"), ROOT, OsStr::new("renamed"), false).unwrap();
        m.materialize(Mode::DropAll, dir.path()).unwrap();
        assert!(dir.path().join("new").exists() && !dir.path().join("renamed").exists());

        let mut m = Model::load(dir.path(), true).unwrap();
        let g = m.create(ROOT, OsStr::new("g"), 0o644, false).unwrap();
        m.sync_file(g).unwrap();
        m.materialize(Mode::DropAll, dir.path()).unwrap();
        assert!(dir.path().join("g").exists(), "ext4 mode: a file fsync persists its own name");
    }
}
