//! The feature store as a Rust user sees it: a writer adds batches of
//! feature vectors and labels (each add durable when it returns), a reader
//! in another handle (or process) follows with `refresh`, and the arrays
//! stay plain `.npy` files.

use mmapkit::store::array::read_header_of;
use mmapkit::store::features::{FeatureStore, Schema, FEATURES, LABELS};

fn le<T: Copy, const N: usize>(v: &[T], f: impl Fn(T) -> [u8; N]) -> Vec<u8> {
    v.iter().flat_map(|&x| f(x)).collect()
}

#[test]
fn write_read_follow_and_reopen() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("train");
    // 3 float32 features per row, int64 labels.
    let schema = Schema::new(3, "<f4", "<i8")?;
    let mut w = FeatureStore::create(&path, &schema)?;
    let mut r = FeatureStore::open(&path, false)?;
    assert_eq!(r.len(), 0);

    let x = le(&[1f32, 2., 3., 4., 5., 6.], f32::to_le_bytes);
    let y = le(&[0i64, 1], i64::to_le_bytes);
    assert_eq!(w.add(&x, &y)?, 2);
    assert_eq!(r.refresh()?, 2);
    assert_eq!(r.committed(), (&x[..], &y[..]));

    // Only one writer; the refusal names this process.
    let e = FeatureStore::open(&path, true).unwrap_err();
    assert_eq!(e.errno(), Some(libc::EWOULDBLOCK));
    w.close()?;

    // Reopened as the writer: appends after the committed rows.
    let mut w = FeatureStore::open_or_create(&path, &schema)?;
    w.add(&le(&[7f32, 8., 9.], f32::to_le_bytes), &le(&[1i64], i64::to_le_bytes))?;
    w.close()?;
    assert_eq!(r.refresh()?, 3);

    // Plain .npy files: the headers say what numpy's np.load will see.
    for (name, descr, shape) in [(FEATURES, "'<f4'", vec![3, 3]), (LABELS, "'<i8'", vec![3])] {
        let (h, _) = read_header_of(&path.join(name))?;
        assert_eq!((h.descr.as_str(), h.shape), (descr, shape), "{name}");
    }
    Ok(())
}
