//! The FUSE side: every request is served from the in-memory [`Model`].

use std::ffi::OsStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow,
    WriteFlags,
};

use crate::model::{Kind, Model, Res};

const TTL: Duration = Duration::from_secs(1);

/// State shared between the FUSE thread and the [`crate::Mount`].
pub(crate) struct Shared {
    pub model: Mutex<Model>,
    /// Modifying operations served so far.
    pub ops: AtomicU64,
    /// Crash when `ops` would exceed this (`u64::MAX`: never).
    pub limit: AtomicU64,
    /// Set at the crash: from then on the model no longer changes, and
    /// every request waits for `released` (the power is off: a process
    /// using the mount hangs until it is killed), then fails with EIO.
    pub frozen: std::sync::atomic::AtomicBool,
    pub released: Mutex<bool>,
    pub released_cv: Condvar,
    /// File fsyncs still to fail with EIO (see `Mount::fail_fsyncs`).
    pub fail_fsyncs: AtomicU64,
    /// File fsyncs failed so far.
    pub failed_fsyncs: AtomicU64,
}

impl Shared {
    pub fn lock(&self) -> MutexGuard<'_, Model> {
        self.model.lock().unwrap_or_else(|e| e.into_inner())
    }
    pub fn is_frozen(&self) -> bool {
        self.frozen.load(Ordering::SeqCst)
    }
    /// Lets the requests that wait since the crash fail (call after killing
    /// the workload, before waiting for it: a request already read by the
    /// FUSE thread holds its process until answered).
    pub fn release(&self) {
        *self.released.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.released_cv.notify_all();
    }
    fn wait_released(&self) {
        let mut r = self.released.lock().unwrap_or_else(|e| e.into_inner());
        while !*r {
            r = self.released_cv.wait(r).unwrap_or_else(|e| e.into_inner());
        }
    }
}

pub(crate) struct CrashFsImpl {
    pub shared: Arc<Shared>,
}

fn errno(e: i32) -> Errno {
    Errno::from_i32(e)
}

impl CrashFsImpl {
    /// Read-only requests: fail once crashed.
    fn model(&self) -> Res<MutexGuard<'_, Model>> {
        let m = self.shared.lock();
        if self.shared.is_frozen() {
            drop(m);
            return Err(self.dead());
        }
        Ok(m)
    }

    /// A request after the crash: no answer until released, then EIO. So
    /// the workload cannot go on (e.g. print that a drop's sync was done)
    /// past the crash point.
    fn dead(&self) -> i32 {
        self.shared.wait_released();
        libc::EIO
    }

    /// Modifying requests: counted; the one past the limit crashes the file system.
    fn modify(&self) -> Res<MutexGuard<'_, Model>> {
        let m = self.shared.lock();
        if self.shared.is_frozen() {
            drop(m);
            return Err(self.dead());
        }
        let n = self.shared.ops.load(Ordering::SeqCst);
        if n >= self.shared.limit.load(Ordering::SeqCst) {
            self.shared.frozen.store(true, Ordering::SeqCst);
            drop(m);
            return Err(self.dead());
        }
        self.shared.ops.store(n + 1, Ordering::SeqCst);
        Ok(m)
    }

    fn attr(m: &Model, ino: u64) -> Res<FileAttr> {
        let n = m.node(ino)?;
        let (kind, size, nlink) = match &n.kind {
            Kind::File { cur, .. } => (FileType::RegularFile, cur.size, 1),
            Kind::Dir { .. } => (FileType::Directory, 4096, 2),
        };
        Ok(FileAttr {
            ino: INodeNo(ino),
            size,
            blocks: size.div_ceil(512),
            atime: n.mtime,
            mtime: n.mtime,
            ctime: n.mtime,
            crtime: UNIX_EPOCH,
            kind,
            perm: n.perm,
            nlink,
            uid: m.owner.0,
            gid: m.owner.1,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        })
    }
}

macro_rules! tri {
    ($reply:expr, $e:expr) => {
        match $e {
            Ok(v) => v,
            Err(e) => return $reply.error(errno(e)),
        }
    };
}

impl Filesystem for CrashFsImpl {
    fn init(&mut self, _req: &Request, _config: &mut KernelConfig) -> std::io::Result<()> {
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let m = tri!(reply, self.model());
        let ino = tri!(reply, m.lookup(parent.0, name));
        let a = tri!(reply, Self::attr(&m, ino));
        reply.entry(&TTL, &a, Generation(0));
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let m = tri!(reply, self.model());
        let a = tri!(reply, Self::attr(&m, ino.0));
        reply.attr(&TTL, &a);
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let mut m = if mode.is_some() || size.is_some() {
            tri!(reply, self.modify())
        } else {
            tri!(reply, self.model())
        };
        if let Some(mode) = mode {
            tri!(reply, m.node_mut(ino.0)).perm = (mode & 0o7777) as u16;
        }
        if let Some(size) = size {
            let (d, dirty) = tri!(reply, m.file_mut(ino.0));
            if size < d.size && !size.is_multiple_of(512) {
                // The partial sector at the new end changes (zeroed tail).
                dirty.insert(size / 512);
            }
            d.set_size(size);
        }
        let a = tri!(reply, Self::attr(&m, ino.0));
        reply.attr(&TTL, &a);
    }

    fn mknod(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        if mode & libc::S_IFMT != libc::S_IFREG {
            return reply.error(Errno::EPERM);
        }
        let mut m = tri!(reply, self.modify());
        let ino = tri!(reply, m.create(parent.0, name, (mode & !umask & 0o7777) as u16, false));
        let a = tri!(reply, Self::attr(&m, ino));
        reply.entry(&TTL, &a, Generation(0));
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let mut m = tri!(reply, self.modify());
        let ino = tri!(reply, m.create(parent.0, name, (mode & !umask & 0o7777) as u16, true));
        let a = tri!(reply, Self::attr(&m, ino));
        reply.entry(&TTL, &a, Generation(0));
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let mut m = tri!(reply, self.modify());
        tri!(reply, m.unlink(parent.0, name, false));
        reply.ok();
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let mut m = tri!(reply, self.modify());
        tri!(reply, m.unlink(parent.0, name, true));
        reply.ok();
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        if !(flags - RenameFlags::RENAME_NOREPLACE).is_empty() {
            return reply.error(Errno::EINVAL);
        }
        let mut m = tri!(reply, self.modify());
        let noreplace = flags.contains(RenameFlags::RENAME_NOREPLACE);
        tri!(reply, m.rename(parent.0, name, newparent.0, newname, noreplace));
        reply.ok();
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let mut m = tri!(reply, self.modify());
        tri!(reply, m.link(ino.0, newparent.0, newname));
        let a = tri!(reply, Self::attr(&m, ino.0));
        reply.entry(&TTL, &a, Generation(0));
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        if flags.0 & libc::O_TRUNC != 0 {
            let mut m = tri!(reply, self.modify());
            let (d, _) = tri!(reply, m.file_mut(ino.0));
            d.set_size(0);
        } else {
            let m = tri!(reply, self.model());
            tri!(reply, m.node(ino.0));
        }
        reply.opened(FileHandle(0), FopenFlags::empty());
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let m = tri!(reply, self.model());
        match &tri!(reply, m.node(ino.0)).kind {
            Kind::File { cur, .. } => reply.data(&cur.read(offset, size as usize)),
            Kind::Dir { .. } => reply.error(Errno::EISDIR),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let mut m = tri!(reply, self.modify());
        let (d, dirty) = tri!(reply, m.file_mut(ino.0));
        let r = d.write(offset, data);
        dirty.extend(r);
        reply.written(data.len() as u32);
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // close() is no sync.
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let mut m = tri!(reply, self.modify());
        let fail = self
            .shared
            .fail_fsyncs
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if fail && m.drop_pending_data(ino.0) {
            // A writeback error: the pending writes are gone.
            self.shared.failed_fsyncs.fetch_add(1, Ordering::SeqCst);
            reply.error(Errno::EIO);
            return;
        }
        tri!(reply, m.sync_file(ino.0));
        reply.ok();
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let m = tri!(reply, self.model());
        let ents = tri!(reply, m.entries(ino.0));
        let parent = match &tri!(reply, m.node(ino.0)).kind {
            Kind::Dir { parent, .. } => *parent,
            Kind::File { .. } => unreachable!("entries() checked"),
        };
        let mut all = vec![(ino.0, FileType::Directory, OsStr::new(".").to_owned())];
        all.push((parent, FileType::Directory, OsStr::new("..").to_owned()));
        for (name, &i) in ents {
            let k = match m.node(i).map(|n| &n.kind) {
                Ok(Kind::Dir { .. }) => FileType::Directory,
                _ => FileType::RegularFile,
            };
            all.push((i, k, name.clone()));
        }
        for (k, (i, kind, name)) in all.into_iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(i), (k + 1) as u64, kind, &name) {
                break;
            }
        }
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let mut m = tri!(reply, self.modify());
        tri!(reply, m.sync_dir(ino.0));
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        reply.statfs(1 << 24, 1 << 23, 1 << 23, 1 << 20, 1 << 19, 4096, 255, 4096);
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: fuser::AccessFlags, reply: ReplyEmpty) {
        reply.ok();
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let mut m = tri!(reply, self.modify());
        let ino = match m.lookup(parent.0, name) {
            Ok(_) if flags & libc::O_EXCL != 0 => return reply.error(Errno::EEXIST),
            Ok(ino) => {
                if flags & libc::O_TRUNC != 0 {
                    tri!(reply, m.file_mut(ino)).0.set_size(0);
                }
                ino
            }
            Err(_) => tri!(reply, m.create(parent.0, name, (mode & !umask & 0o7777) as u16, false)),
        };
        let a = tri!(reply, Self::attr(&m, ino));
        reply.created(&TTL, &a, Generation(0), FileHandle(0), FopenFlags::empty());
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let mut m = tri!(reply, self.modify());
        let (d, dirty) = tri!(reply, m.file_mut(ino.0));
        if mode & libc::FALLOC_FL_PUNCH_HOLE != 0 {
            dirty.extend(d.zero(offset, length));
        } else if mode & !libc::FALLOC_FL_KEEP_SIZE != 0 {
            return reply.error(Errno::EOPNOTSUPP);
        } else if mode & libc::FALLOC_FL_KEEP_SIZE == 0 && offset + length > d.size {
            d.set_size(offset + length);
        }
        reply.ok();
    }
}
