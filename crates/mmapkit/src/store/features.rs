//! A feature store: [`FeatureStore`], feature vectors and their labels in
//! two growable `.npy` files, committed together.
//!
//! A store is a directory:
//!
//! ```text
//! features.npy   n × dim feature vectors (an ArrayStore)
//! labels.npy     n labels (an ArrayStore)
//! meta.json      schema, the committed row count, format version
//! ```
//!
//! Both arrays are real `.npy` files (`np.load` reads them at any moment,
//! possibly with rows past the committed count); `meta.json`'s `rows` is
//! the count readers trust. This is the format `mmapkit.FeatureStore`
//! (Python) has always written; stores it wrote open here unchanged.
//!
//! # The commit of [`add`](FeatureStore::add)
//!
//! 1. The rows are appended to `features.npy`, the labels to `labels.npy`
//!    (each header's count is rewritten in place after its rows: live
//!    readers of the arrays alone never see unwritten rows).
//! 2. Each array is synced once: one `msync(MS_SYNC)` over its header and
//!    rows ([`ArrayStore::sync`]). The order within an array does not
//!    matter, because nothing trusts an array's header on its own after a
//!    power loss: `meta.json` does not yet count the rows.
//! 3. `meta.json` is replaced with the new count: a temp file, `fsync`,
//!    `rename`, directory `fsync` (the directory sync makes the add
//!    durable when it returns; the rename is what commits).
//!
//! Four syncs per add (the Python implementation did eight: each array's
//! `flush` synced data, header and its durable-rows record separately).
//! The arrays keep no durable-rows record (`StoreOptions::durable_record`
//! off): `meta.json` is the commit record of both.
//!
//! After a power loss at any point, the store opens with the old or the
//! new count, and the arrays hold at least that many durable rows: the
//! rename reaches the disk only after step 2 returned, so a `meta.json`
//! counting `n` rows implies both arrays' first `n` rows and a header
//! counting at least `n` are on disk. Before the rename is durable the old
//! `meta.json` (count `m`) stands, and rows below `m` were synced by the add
//! that committed them; headers only ever grow past `m` (a writer cuts
//! them back to exactly `m`, never below). Rows past the count are cut off
//! by the next writer; readers ignore them.
//!
//! # Writers and readers
//!
//! One writer: it holds the features array's `flock` (then the labels'),
//! released on [`close`](FeatureStore::close) (views a binding lent stay
//! readable). A second writer gets `EWOULDBLOCK`, naming this process when
//! it holds the lock itself. [`create`](FeatureStore::create) replaces any
//! store at the path while holding the lock of the old features array, and
//! removes `meta.json` first, so a crash in between leaves "not a
//! FeatureStore", never a count the arrays do not hold. Readers take no
//! lock and follow with [`refresh`](FeatureStore::refresh).
//!
//! ```
//! use mmapkit::store::features::{FeatureStore, Schema};
//! # let dir = tempfile::tempdir()?;
//! # let path = dir.path().join("train");
//! let mut w = FeatureStore::create(&path, &Schema::new(2, "<f4", "<i8")?)?;
//! let x: Vec<u8> = [1f32, 2., 3., 4.].iter().flat_map(|v| v.to_le_bytes()).collect();
//! let y: Vec<u8> = [0i64, 1].iter().flat_map(|v| v.to_le_bytes()).collect();
//! assert_eq!(w.add(&x, &y)?, 2); // durable when it returns
//! let r = FeatureStore::open(&path, false)?; // a reader, e.g. another process
//! assert_eq!(r.committed(), (&x[..], &y[..]));
//! w.close()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::convert::Infallible;
use std::path::{Path, PathBuf};

use super::array::{lock_writer_for, ArrayStore, StoreOptions};
use crate::dtype::TypeStr;
use crate::{Error, Result};

/// `meta.json`'s `format`.
pub const FORMAT: &str = "mmapkit.FeatureStore";
/// `meta.json`'s `version`.
pub const VERSION: u64 = 1;
/// The commit record's file name.
pub const META: &str = "meta.json";
/// The features array's file name.
pub const FEATURES: &str = "features.npy";
/// The labels array's file name.
pub const LABELS: &str = "labels.npy";
/// The largest `meta.json` read (it is a few hundred bytes).
const META_MAX: u64 = 64 << 10;

/// What a store holds: rows of `dim` items of `dtype`, labels of
/// `label_dtype` (numpy type strings as `.npy` headers write them, e.g.
/// `<f4`, `|i1`; which types a front end accepts is its choice: the core
/// needs plain fixed-size items).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schema {
    dim: u64,
    dtype: String,
    item_size: usize,
    label_dtype: String,
    label_item_size: usize,
}

fn item_size_of(dtype: &str) -> Option<usize> {
    TypeStr::parse(dtype)
        .filter(|t| "biufc".contains(t.kind))
        .and_then(|t| t.item_size())
        .filter(|&n| n > 0)
}

impl Schema {
    /// A schema; an unknown type string or `dim` 0 is invalid.
    pub fn new(dim: u64, dtype: &str, label_dtype: &str) -> Result<Schema> {
        let bad = |what: &str, d: &str| {
            Error::InvalidArgument(format!(
                "{what} must be a plain numeric numpy type string, got {d:?}"
            ))
        };
        if dim == 0 {
            return Err(Error::InvalidArgument("dim must be a positive integer, got 0".into()));
        }
        let item_size = item_size_of(dtype).ok_or_else(|| bad("dtype", dtype))?;
        let label_item_size =
            item_size_of(label_dtype).ok_or_else(|| bad("label_dtype", label_dtype))?;
        Ok(Schema {
            dim,
            dtype: dtype.to_owned(),
            item_size,
            label_dtype: label_dtype.to_owned(),
            label_item_size,
        })
    }
    /// Items per feature vector.
    pub fn dim(&self) -> u64 {
        self.dim
    }
    /// The features' numpy type string.
    pub fn dtype(&self) -> &str {
        &self.dtype
    }
    /// The labels' numpy type string.
    pub fn label_dtype(&self) -> &str {
        &self.label_dtype
    }
    /// Bytes per feature vector.
    pub fn row_bytes(&self) -> usize {
        self.dim as usize * self.item_size
    }
    /// Bytes per label.
    pub fn label_bytes(&self) -> usize {
        self.label_item_size
    }
}

/// `meta.json` as the Python implementation writes it (`json.dumps(meta,
/// indent=1)` and a newline), so either reads what the other wrote.
fn encode_meta(s: &Schema, rows: u64) -> String {
    let q = |v: &str| serde_json::Value::from(v).to_string();
    format!(
        "{{\n \"format\": {},\n \"version\": {VERSION},\n \"dim\": {},\n \"dtype\": {},\n \
         \"label_dtype\": {},\n \"rows\": {rows},\n \"features\": {},\n \"labels\": {}\n}}\n",
        q(FORMAT),
        s.dim,
        q(&s.dtype),
        q(&s.label_dtype),
        q(FEATURES),
        q(LABELS)
    )
}

/// Parses `meta.json`'s bytes: the schema and the committed count.
fn decode_meta(path: &Path, bytes: &[u8]) -> Result<(Schema, u64)> {
    let fmt = |d: String| Error::Format { path: path.to_owned(), detail: d };
    let v: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| fmt(format!("not valid JSON ({e})")))?;
    let m = v.as_object().filter(|m| m.get("format").and_then(|f| f.as_str()) == Some(FORMAT));
    let Some(m) = m else {
        return Err(fmt(format!("not a FeatureStore's {META} (format is not '{FORMAT}')")));
    };
    if m.get("version").and_then(|v| v.as_u64()) != Some(VERSION) {
        let shown = m.get("version").map_or("None".to_owned(), |v| v.to_string());
        return Err(fmt(format!(
            "FeatureStore format version {shown} is not supported (this is {VERSION})"
        )));
    }
    let bad = |d: &str| fmt(format!("bad schema ({d})"));
    let uint = |k: &str| m.get(k).and_then(|v| v.as_u64());
    let (Some(dim), Some(rows)) = (uint("dim").filter(|&d| d >= 1), uint("rows")) else {
        return Err(bad("dim must be a positive integer and rows a non-negative integer"));
    };
    let text = |k: &str| m.get(k).and_then(|v| v.as_str()).ok_or_else(|| bad(&format!("no {k}")));
    let schema =
        Schema::new(dim, text("dtype")?, text("label_dtype")?).map_err(|e| bad(&e.message()))?;
    Ok((schema, rows))
}

/// The `meta.json` of the store at `dir`: a missing directory or
/// `meta.json` is `ENOENT` (naming which), a file where the directory
/// should be `ENOTDIR`.
fn read_meta(dir: &Path) -> Result<(Schema, u64)> {
    let enoent = std::io::Error::from_raw_os_error(libc::ENOENT);
    match std::fs::metadata(dir) {
        Ok(m) if !m.is_dir() => {
            let e = std::io::Error::from_raw_os_error(libc::ENOTDIR);
            return Err(Error::io(dir, "not a FeatureStore (a FeatureStore is a directory)", e));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Error::io(dir, "no such FeatureStore", enoent));
        }
        _ => {}
    }
    let p = dir.join(META);
    match crate::fs::read_small(&p, META_MAX)? {
        Some(b) => decode_meta(&p, &b),
        None => Err(Error::io(&p, "not a FeatureStore (no meta.json)", enoent)),
    }
}

/// Replaces `meta.json` atomically (temp file, fsync, rename, directory
/// fsync): the commit.
fn write_meta(dir: &Path, s: &Schema, rows: u64) -> Result<()> {
    use std::io::Write;
    let p = dir.join(META);
    let mut f = crate::fs::AtomicFile::create(&p, &[])?;
    let tmp = f.temp_path().to_owned();
    f.file_mut()
        .write_all(encode_meta(s, rows).as_bytes())
        .map_err(|e| Error::io(&tmp, "write", e))?;
    f.commit(true)
}

/// Options the arrays are opened with: `meta.json` is their commit record.
fn array_options() -> StoreOptions {
    StoreOptions::default().durable_record(false)
}

/// (device, inode) of the file at `path`, or of an open array.
fn file_id(m: &std::fs::Metadata) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    (m.dev(), m.ino())
}

fn id_of(a: &ArrayStore) -> Result<(u64, u64)> {
    a.map().file().metadata().map(|m| file_id(&m)).map_err(|e| Error::io(a.path(), "stat", e))
}

/// The commit state of a feature store without its two arrays: for a
/// binding that holds the arrays in its own objects (to lend their bytes);
/// every method takes them as `(features, labels)`. Rust users use
/// [`FeatureStore`], which holds both.
#[derive(Debug)]
pub struct Commit {
    dir: PathBuf,
    schema: Schema,
    rows: u64,
    writable: bool,
    ids: [(u64, u64); 2],
}

/// Arrays that [`Commit::refresh`] opened again (their file was replaced,
/// or cut back below what this reader had mapped): the caller puts them
/// in place of its old ones (views of the old ones stay valid).
#[derive(Debug, Default)]
pub struct Reopened {
    /// The new features array, if it was reopened.
    pub features: Option<ArrayStore>,
    /// The new labels array, if it was reopened.
    pub labels: Option<ArrayStore>,
}

impl Commit {
    /// The store's directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }
    /// The schema.
    pub fn schema(&self) -> &Schema {
        &self.schema
    }
    /// The committed row count.
    pub fn len(&self) -> u64 {
        self.rows
    }
    /// Whether no rows are committed.
    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }
    /// Whether this is the writer.
    pub fn is_writable(&self) -> bool {
        self.writable
    }

    /// Checks that the arrays hold the schema's rows and at least the
    /// committed count.
    fn check(&self, f: &ArrayStore, l: &ArrayStore) -> Result<()> {
        let s = &self.schema;
        let shape = |r: &[u64]| match r {
            [] => "()".to_owned(),
            [one] => format!("({one},)"),
            dims => format!("({})", dims.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")),
        };
        for (a, want_shape, want) in [(f, vec![s.dim], &s.dtype), (l, vec![], &s.label_dtype)] {
            let got = a.header().simple_dtype().unwrap_or(a.descr());
            if a.row_shape() != want_shape.as_slice() || !same_dtype(got, want) {
                return Err(Error::Format {
                    path: a.path().to_owned(),
                    detail: format!(
                        "holds rows of {} {got}, but {META} says {} {want}",
                        shape(a.row_shape()),
                        shape(&want_shape)
                    ),
                });
            }
            if a.len() < self.rows {
                return Err(Error::Format {
                    path: a.path().to_owned(),
                    detail: format!(
                        "has {} rows, fewer than the {} {META} commits (damaged?)",
                        a.len(),
                        self.rows
                    ),
                });
            }
        }
        Ok(())
    }

    /// Appends `n` rows, written in place by `fill_features` and
    /// `fill_labels` (each gets its rows' bytes), and commits them (see the
    /// [module docs](self)); returns the committed count. A fill's error
    /// is returned inside `Ok` and nothing is committed; on any error the
    /// rows written are cut off again (best effort: else the next writer
    /// does it).
    pub fn add_with<E>(
        &mut self,
        f: &mut ArrayStore,
        l: &mut ArrayStore,
        n: u64,
        fill_features: impl FnOnce(&mut [u8]) -> std::result::Result<(), E>,
        fill_labels: impl FnOnce(&mut [u8]) -> std::result::Result<(), E>,
    ) -> Result<std::result::Result<u64, E>> {
        if !self.writable {
            return Err(Error::ReadOnly { path: self.dir.clone() });
        }
        if n == 0 {
            return Ok(Ok(self.rows));
        }
        let new =
            self.rows.checked_add(n).ok_or_else(|| Error::invalid(&self.dir, "too many rows"))?;
        let r = (|| {
            if let Err(e) = f.append_with(n, fill_features)? {
                return Ok(Err(e));
            }
            if let Err(e) = l.append_with(n, fill_labels)? {
                return Ok(Err(e));
            }
            if !data_syncs_skipped() {
                f.sync()?;
                l.sync()?;
            }
            // Never commit rows another process cut out of the files (a
            // sync over them succeeds; their bytes are in no file).
            f.check_rows(new)?;
            l.check_rows(new)?;
            write_meta(&self.dir, &self.schema, new)?;
            Ok(Ok(new))
        })();
        match r {
            Ok(Ok(_)) => self.rows = new,
            _ => {
                for a in [f, l] {
                    if a.len() > self.rows {
                        // Its own error is the one to report; the next
                        // writer cuts them back otherwise.
                        let _ = a.truncate_rows(self.rows);
                    }
                }
            }
        }
        r
    }

    /// Readers: reads `meta.json` again and maps the rows committed since;
    /// returns the count and the arrays it had to open again (see
    /// [`Reopened`]). Writers: the count. A changed schema (the store was
    /// re-created with another one) is [`Error::Format`].
    pub fn refresh(&mut self, f: &mut ArrayStore, l: &mut ArrayStore) -> Result<(u64, Reopened)> {
        let mut out = Reopened::default();
        if self.writable {
            return Ok((self.rows, out));
        }
        let (schema, rows) = read_meta(&self.dir)?;
        if schema != self.schema {
            return Err(Error::Format {
                path: self.dir.join(META),
                detail: "the schema changed (was the store re-created?); open it again".into(),
            });
        }
        for (i, (a, slot)) in
            [(&mut *f, &mut out.features), (&mut *l, &mut out.labels)].into_iter().enumerate()
        {
            let same = std::fs::metadata(a.path()).map(|m| file_id(&m)).ok() == Some(self.ids[i]);
            match if same {
                a.refresh().map(drop)
            } else {
                Err(Error::Format { path: a.path().to_owned(), detail: "replaced".into() })
            } {
                Ok(()) => {}
                // Replaced ("w"), or a writer cut off rows a dead writer had
                // left (the count went down): map the file again.
                Err(e) if e.kind() == crate::ErrorKind::Format => {
                    let new = ArrayStore::open_with(a.path(), false, None, &array_options())?;
                    self.ids[i] = id_of(&new)?;
                    *slot = Some(new);
                }
                Err(e) => return Err(e),
            }
        }
        self.rows = rows;
        self.check(out.features.as_ref().unwrap_or(f), out.labels.as_ref().unwrap_or(l))?;
        Ok((rows, out))
    }
}

/// Tests: what `create` calls before it makes each file.
#[cfg(test)]
type StepHook = Option<Box<dyn Fn(&str)>>;

#[cfg(test)]
thread_local! {
    static STEP: std::cell::RefCell<StepHook> = const { std::cell::RefCell::new(None) };
}

/// `create` is about to make the file `name` (a test hook).
fn step(_name: &str) {
    #[cfg(test)]
    STEP.with(|s| {
        if let Some(f) = &*s.borrow() {
            f(_name)
        }
    });
}

/// Whether adds commit without syncing the arrays: only with the
/// `test-hooks` feature, when `MMAPKIT_TEST_FEATURES_NO_SYNC` is set (the
/// power-loss matrix's negative control, which must catch it).
fn data_syncs_skipped() -> bool {
    #[cfg(feature = "test-hooks")]
    return std::env::var_os("MMAPKIT_TEST_FEATURES_NO_SYNC").is_some();
    #[cfg(not(feature = "test-hooks"))]
    false
}

/// A fill for [`Commit::add_with`] that copies `src`.
fn copy_from(src: &[u8]) -> impl FnOnce(&mut [u8]) -> std::result::Result<(), Infallible> + '_ {
    move |dst| {
        dst.copy_from_slice(src);
        Ok(())
    }
}

fn same_dtype(a: &str, b: &str) -> bool {
    // `=` and the native `<` are one order here (little-endian hosts).
    let norm = |s: &str| s.replacen('=', "<", 1);
    a == b || norm(a) == norm(b)
}

/// A feature store: see the [module docs](self).
#[derive(Debug)]
pub struct FeatureStore {
    commit: Commit,
    features: ArrayStore,
    labels: ArrayStore,
}

impl FeatureStore {
    /// Creates a store at `dir` (creating the directory durably),
    /// replacing any store there, and opens it as the writer. A store
    /// that has a writer is not replaced (`EWOULDBLOCK`).
    pub fn create(dir: impl AsRef<Path>, schema: &Schema) -> Result<FeatureStore> {
        let dir = dir.as_ref();
        if std::fs::metadata(dir).is_ok_and(|m| !m.is_dir()) {
            let e = std::io::Error::from_raw_os_error(libc::ENOTDIR);
            return Err(Error::io(dir, "a FeatureStore is a directory", e));
        }
        crate::fs::create_dir_durably(dir)?;
        let fpath = dir.join(FEATURES);
        let lpath = dir.join(LABELS);
        // The lock of the old features array is held from here until it is
        // removed (an opener then finds none), then the new one's (taken by
        // `ArrayStore::create` before it appears), so another writer can
        // neither write to an array being replaced nor pair a new array
        // with an old one.
        let old = match crate::fs::open_nonblocking(&fpath, 0) {
            Ok(file) => {
                lock_writer_for(&file, &fpath, true)?;
                Some(file)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(Error::io(&fpath, "open", e)),
        };
        // No meta.json while the arrays are replaced: a crash in between
        // leaves "not a FeatureStore", never a count the arrays do not hold.
        crate::fs::remove_file_durably(&dir.join(META))?;
        // Removed while locked: `ArrayStore::create` refuses to replace an
        // array whose lock is held, even by this writer.
        crate::fs::remove_file_durably(&fpath)?;
        let opts = array_options();
        let d = |t: &str| format!("'{t}'");
        step(FEATURES);
        let features =
            ArrayStore::create(&fpath, &d(&schema.dtype), schema.item_size, &[schema.dim], &opts);
        drop(old);
        let features = features?;
        step(LABELS);
        let labels = ArrayStore::create(
            &lpath,
            &d(&schema.label_dtype),
            schema.label_item_size,
            &[],
            &opts,
        )?;
        step(META);
        write_meta(dir, schema, 0)?;
        let ids = [id_of(&features)?, id_of(&labels)?];
        Ok(FeatureStore {
            commit: Commit {
                dir: dir.to_owned(),
                schema: schema.clone(),
                rows: 0,
                writable: true,
                ids,
            },
            features,
            labels,
        })
    }

    /// Opens the store at `dir`: a reader (no lock; sees the rows committed
    /// so far, [`refresh`](Self::refresh) for more) or the one writer
    /// (which cuts off rows past the committed count that a writer that
    /// died left).
    pub fn open(dir: impl AsRef<Path>, writable: bool) -> Result<FeatureStore> {
        let dir = dir.as_ref();
        let (schema, rows) = read_meta(dir)?;
        let opts = array_options();
        let features = ArrayStore::open_with(dir.join(FEATURES), writable, None, &opts)?;
        let labels = ArrayStore::open_with(dir.join(LABELS), writable, None, &opts)?;
        let ids = [id_of(&features)?, id_of(&labels)?];
        let mut s = FeatureStore {
            commit: Commit { dir: dir.to_owned(), schema, rows, writable, ids },
            features,
            labels,
        };
        s.commit.check(&s.features, &s.labels)?;
        if writable {
            for a in [&mut s.features, &mut s.labels] {
                if a.len() > rows {
                    a.truncate_rows(rows)?;
                }
            }
            // ... and the temp file of a meta.json replace it did not finish.
            crate::fs::remove_stale_temp_files_of(&dir.join(META));
        }
        Ok(s)
    }

    /// Opens the store at `dir` as the writer, or creates it with
    /// `schema` when there is none (no `meta.json`); Python's mode `"a"`.
    pub fn open_or_create(dir: impl AsRef<Path>, schema: &Schema) -> Result<FeatureStore> {
        let dir = dir.as_ref();
        if dir.join(META).exists() {
            Self::open(dir, true)
        } else {
            Self::create(dir, schema)
        }
    }

    /// Appends rows (`features`: whole rows of [`Schema::row_bytes`],
    /// `labels`: one label each, native byte order) and commits them;
    /// returns the committed count. Durable when it returns.
    pub fn add(&mut self, features: &[u8], labels: &[u8]) -> Result<u64> {
        let n = self.check_add(features.len(), labels.len())?;
        let r = self.commit.add_with(
            &mut self.features,
            &mut self.labels,
            n,
            copy_from(features),
            copy_from(labels),
        )?;
        Ok(r.unwrap_or_else(|e| match e {}))
    }

    /// The number of rows `features_len` and `labels_len` bytes hold, or
    /// an error unless they are whole rows of the same count.
    pub fn check_add(&self, features_len: usize, labels_len: usize) -> Result<u64> {
        Self::rows_in(&self.commit, features_len, labels_len)
    }

    /// [`check_add`](Self::check_add) for a [`Commit`].
    pub fn rows_in(c: &Commit, features_len: usize, labels_len: usize) -> Result<u64> {
        let (rb, lb) = (c.schema.row_bytes(), c.schema.label_bytes());
        if !features_len.is_multiple_of(rb)
            || !labels_len.is_multiple_of(lb)
            || features_len / rb != labels_len / lb
        {
            return Err(Error::invalid(
                &c.dir,
                format!(
                    "{features_len} bytes of features and {labels_len} bytes of labels are not the same \
                     number of whole rows ({rb} and {lb} bytes each)"
                ),
            ));
        }
        Ok((features_len / rb) as u64)
    }

    /// Readers: sees rows committed since (see [`Commit::refresh`]);
    /// returns the committed count.
    pub fn refresh(&mut self) -> Result<u64> {
        let (rows, re) = self.commit.refresh(&mut self.features, &mut self.labels)?;
        if let Some(f) = re.features {
            self.features = f;
        }
        if let Some(l) = re.labels {
            self.labels = l;
        }
        Ok(rows)
    }

    /// The committed rows' bytes: (features, labels).
    pub fn committed(&self) -> (&[u8], &[u8]) {
        let n = self.commit.rows as usize;
        (
            &self.features.data()[..n * self.commit.schema.row_bytes()],
            &self.labels.data()[..n * self.commit.schema.label_bytes()],
        )
    }

    /// The committed row count.
    pub fn len(&self) -> u64 {
        self.commit.rows
    }
    /// Whether no rows are committed.
    pub fn is_empty(&self) -> bool {
        self.commit.rows == 0
    }
    /// The schema.
    pub fn schema(&self) -> &Schema {
        &self.commit.schema
    }
    /// The store's directory.
    pub fn path(&self) -> &Path {
        &self.commit.dir
    }
    /// Whether this is the writer.
    pub fn is_writable(&self) -> bool {
        self.commit.writable
    }
    /// The features array (may hold rows past the committed count).
    pub fn features(&self) -> &ArrayStore {
        &self.features
    }
    /// The labels array (may hold rows past the committed count).
    pub fn labels(&self) -> &ArrayStore {
        &self.labels
    }

    /// The commit state and the two arrays, for a binding that lends the
    /// arrays' bytes from objects of its own.
    pub fn into_parts(self) -> (Commit, ArrayStore, ArrayStore) {
        (self.commit, self.features, self.labels)
    }

    /// Ends writing: each array is trimmed and flushed and the writer lock
    /// is released. Readers: nothing to do. Both arrays are closed; the
    /// first error is returned.
    pub fn close(self) -> Result<()> {
        // Labels first: the features' lock is the store's, and a writer
        // that gets it must find the labels' free too.
        let l = self.labels.close();
        let r = self.features.close();
        l.and(r)
    }
}

#[cfg(test)]
mod tests;
