use super::select::{
    select_keys, select_keys_limit, select_keys_window_with, top_counts, window_count,
    window_count_scalar, CHUNK,
};
use super::*;
use proptest::prelude::*;

/// Sorted non-NaN values: the naive reference model.
fn sorted<T: Element>(v: &[T]) -> Vec<T> {
    let mut s: Vec<T> = v.iter().copied().filter(|x| !x.is_nan()).collect();
    s.sort_by(|a, b| a.partial_cmp(b).unwrap());
    s
}

fn same(a: f64, b: f64) -> bool {
    a == b || (a.is_nan() && b.is_nan())
}

fn check_all<T: Element>(v: &[T]) {
    let s = sorted(v);
    let has_nan = s.len() < v.len();
    // Every rank by selection equals the sorted order, and the window fast
    // path (small samples, so it also misses and says so) never lies.
    if !s.is_empty() && !has_nan {
        for sample in [1, 3, 50] {
            let mid = s.len() as u64 / 2;
            for ranks in
                [vec![mid], vec![0], vec![s.len() as u64 - 1], vec![mid.saturating_sub(1), mid]]
            {
                if let Some(keys) = select_keys_window_with(v, &ranks, sample).unwrap() {
                    for (r, k) in ranks.iter().zip(keys) {
                        assert!(T::from_key(k) == s[*r as usize], "window rank {r}");
                    }
                }
            }
        }
    }
    if !s.is_empty() {
        let top = top_counts(v);
        let ranks: Vec<u64> = (0..s.len() as u64).collect();
        let keys = select_keys(v, &top, &ranks).unwrap();
        for (i, k) in keys.into_iter().enumerate() {
            assert!(T::from_key(k) == s[i], "rank {i}: {:?} != {:?}", T::from_key(k), s[i]);
        }
    }
    // Median, with and without NaN skipping.
    let want = |s: &[T]| {
        let n = s.len();
        if n == 0 {
            f64::NAN
        } else if n % 2 == 1 {
            s[n / 2].to_f64()
        } else {
            T::mid(s[n / 2 - 1], s[n / 2])
        }
    };
    assert!(same(median(v, true), want(&s)));
    assert!(same(median(v, false), if has_nan { f64::NAN } else { want(&s) }));
    // Inverted-CDF quantiles are elements at ceil(n q) - 1.
    if !s.is_empty() && !has_nan {
        let qs = [0.0, 0.1, 0.25, 0.5, 0.9, 1.0];
        let got = quantiles(v, &qs, Method::InvertedCdf, false).unwrap();
        for (q, g) in qs.iter().zip(got) {
            let idx = ((s.len() as f64 * q).ceil() as usize).saturating_sub(1);
            assert_eq!(g, s[idx].value(), "q={q}");
        }
        // Interpolating next to an infinity gives NaN (inf * 0), as numpy's
        // lerp does for an array of q (e.g. [-0.0, inf] at q = 0).
        let lin = quantiles(v, &[0.0, 1.0], Method::Linear, false).unwrap();
        let any_inf = s[0].to_f64().is_infinite() || s[s.len() - 1].to_f64().is_infinite();
        assert!(same(lin[0].as_f64(), s[0].to_f64()) || any_inf);
        assert!(same(lin[1].as_f64(), s[s.len() - 1].to_f64()) || any_inf);
        assert_eq!(min(v, false).unwrap(), s[0].value());
        assert_eq!(max(v, false).unwrap(), s[s.len() - 1].value());
    }
    if has_nan {
        assert!(min(v, false).unwrap().as_f64().is_nan());
        if !s.is_empty() {
            assert_eq!(max(v, true).unwrap(), s[s.len() - 1].value());
        }
    }
}

/// One property test per `name: values;`: `check_all` (every statistic
/// against sorting) on up to 300 values drawn from `values`.
macro_rules! matches_sort {
    ($($name:ident: $values:expr;)*) => {
        proptest! {
            #![proptest_config(ProptestConfig::with_cases(40))]
            $(
                #[test]
                fn $name(v in prop::collection::vec($values, 0..300)) { check_all(&v) }
            )*
        }
    };
}

matches_sort! {
    i8_matches_sort: any::<i8>();
    u8_matches_sort: any::<u8>();
    i16_matches_sort: any::<i16>();
    u16_matches_sort: any::<u16>();
    i32_matches_sort: any::<i32>();
    u32_matches_sort: any::<u32>();
    i64_matches_sort: any::<i64>();
    u64_matches_sort: any::<u64>();
    f32_matches_sort: prop_oneof![any::<f32>(), Just(f32::NAN), Just(f32::INFINITY), Just(f32::NEG_INFINITY), Just(-0.0f32), -3.0f32..3.0];
    f64_matches_sort: prop_oneof![any::<f64>(), Just(f64::NAN), Just(f64::INFINITY), Just(f64::NEG_INFINITY), Just(-0.0f64), -3.0f64..3.0];
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]
    #[test]
    fn int_sum_is_exact(v in prop::collection::vec(any::<i64>(), 0..200)) {
        let want: i128 = v.iter().map(|&x| x as i128).sum();
        prop_assert_eq!(sum(&v, false), Sum::Int(want));
    }
    #[test]
    fn histogram_counts_match_edges(v in prop::collection::vec(-100.0f64..100.0, 1..300), bins in 1usize..40) {
        let h = histogram(&v, bins, None).unwrap();
        prop_assert_eq!(h.counts.iter().sum::<u64>(), v.len() as u64);
        for &x in &v {
            let i = h.edges.partition_point(|&e| e <= x).saturating_sub(1).min(bins - 1);
            prop_assert!(h.edges[i] <= x && (x < h.edges[i + 1] || i == bins - 1));
        }
    }
}

#[test]
fn linear_quantile_next_to_an_infinity_is_nan_like_numpy() {
    // np.quantile(np.array([-0.0, np.inf]), [0, 0.5, 1]) -> [nan, nan, nan]
    let got =
        quantiles(&[-0.0f64, f64::INFINITY], &[0.0, 0.5, 1.0], Method::Linear, false).unwrap();
    assert!(got.iter().all(|v| v.as_f64().is_nan()), "{got:?}");
    check_all(&[-0.0f64, f64::INFINITY]);
    check_all(&[-0.0f32, f32::INFINITY]);
}

#[test]
fn keys_preserve_order() {
    let f = [
        f64::NEG_INFINITY,
        -1e300,
        -1.0,
        -f64::MIN_POSITIVE,
        -0.0,
        0.0,
        1e-310,
        1.0,
        f64::MAX,
        f64::INFINITY,
    ];
    for w in f.windows(2) {
        assert!(w[0].key() < w[1].key(), "{:?}", w);
        assert_eq!(f64::from_key(w[0].key()).to_bits(), w[0].to_bits());
    }
    assert!(
        i64::MIN.key() < (-1i64).key() && (-1i64).key() < 0i64.key() && 0i64.key() < i64::MAX.key()
    );
    assert_eq!(i8::from_key((-5i8).key()), -5);
}

#[test]
fn big_bucket_is_narrowed_again() {
    // More than COLLECT values share their top 16 bits: forces the
    // histogram-the-next-16-bits path for 32-bit keys (and a third pass
    // for 64-bit ones).
    // 20000 values in 4096 distinct top-16-bit buckets of a 32-bit key,
    // with a collect limit of 3: every bucket is too big and is
    // histogrammed on its next 16 bits (64-bit keys: twice).
    let v32: Vec<u32> =
        (0..20_000u32).map(|i| (i.wrapping_mul(2654435761) % 4096) << 16 | (i % 7)).collect();
    let v64: Vec<u64> = v32.iter().map(|&x| (x as u64) << 32 | (x as u64 % 5)).collect();
    fn check<T: Element + Ord>(v: &[T]) {
        let mut s = v.to_vec();
        s.sort_unstable();
        let top = top_counts(v);
        let ranks = [0, 1, 4999, 10_000, 19_999];
        let got = select_keys_limit(v, &top, &ranks, 3).unwrap();
        for (r, k) in ranks.iter().zip(got) {
            assert_eq!(T::from_key(k), s[*r as usize], "rank {r}");
        }
    }
    check(&v32);
    check(&v64);
}

#[test]
fn window_misled_by_the_sample_falls_back() {
    // Every sampled position (stride 10) holds 1000, the rest 0: the sample
    // puts the window around 1000, the true median is 0.
    let v: Vec<i16> = (0..100_000).map(|i| if i % 10 == 0 { 1000 } else { 0 }).collect();
    assert_eq!(select_keys_window_with(&v[..], &[50_000], 10_000).unwrap(), None);
    assert_eq!(median(&v, false), 0.0);
    let u: Vec<u16> = (0..100_001u32).map(|i| (i % 65536) as u16).collect();
    let mut s = u.clone();
    s.sort_unstable();
    assert_eq!(median(&u, false), s[50_000] as f64);
}

#[test]
fn median_arithmetic_is_numpys() {
    // Even length: mean of the middle two, float32 overflow like numpy.
    assert_eq!(median(&[3e38f32, 3e38], false), f64::INFINITY);
    assert_eq!(median(&[1i64, 2], false), 1.5);
    assert_eq!(median(&[i64::MAX, i64::MAX], false), i64::MAX as f64);
    assert!(median(&[f64::NEG_INFINITY, f64::INFINITY], false).is_nan());
    assert!(median::<f64>(&[], false).is_nan());
    assert!(median(&[1.0, f64::NAN], false).is_nan());
    assert_eq!(median(&[1.0, f64::NAN, 3.0], true), 2.0);
    assert_eq!(median(&[7u8], false), 7.0);
    assert_eq!(median(&[3e38f32], false), 3e38f32 as f64);
}

#[test]
fn linear_quantile_matches_numpy_values() {
    // np.quantile(np.arange(10), [0.1, 0.33, 0.5, 0.99]) == [0.9, 2.97, 4.5, 8.91]
    let v: Vec<i32> = (0..10).collect();
    let got: Vec<f64> = quantiles(&v, &[0.1, 0.33, 0.5, 0.99], Method::Linear, false)
        .unwrap()
        .into_iter()
        .map(Value::as_f64)
        .collect();
    assert_eq!(got, vec![0.9, 2.0 + (9.0f64 * 0.33 - 2.0), 4.5, 8.91]);
    // The int16 case numpy gets wrong (it wraps b - a): exact here.
    assert_eq!(
        quantiles(&[-30000i16, 30000], &[0.5], Method::Linear, false).unwrap(),
        vec![Value::Float(0.0)]
    );
    assert!(quantiles(&[1.0f64], &[1.5], Method::Linear, false).is_err());
    assert!(quantiles::<f64>(&[], &[0.5], Method::Linear, false).is_err());
}

#[test]
fn min_max_sum_mean_edge_cases() {
    assert!(min::<i32>(&[], false).is_err());
    assert_eq!(max(&[1.0, f64::NAN, 5.0], true).unwrap(), Value::Float(5.0));
    assert!(max(&[f64::NAN], true).unwrap().as_f64().is_nan());
    assert_eq!(sum(&[u64::MAX, u64::MAX], false), Sum::Int(2 * u64::MAX as i128));
    assert!(sum(&[f64::INFINITY, f64::NEG_INFINITY], false).as_f64().is_nan());
    assert_eq!(sum(&[f64::INFINITY, 1.0], false).as_f64(), f64::INFINITY);
    assert_eq!(sum(&[1.0, f64::NAN, 2.0], true).as_f64(), 3.0);
    // Compensated: 1 + 1e100 - 1e100 summed in one order loses the 1 naively.
    assert_eq!(sum(&[1.0, 1e100, 1.0, -1e100], false).as_f64(), 2.0);
    assert_eq!(mean(&[1u8, 2, 3, 4], false), 2.5);
    assert!(mean::<f32>(&[], false).is_nan());
    assert_eq!(mean(&[1.0f32, f32::NAN, 3.0], true), 2.0);
}

#[test]
fn histogram_matches_numpy_examples() {
    // np.histogram([1, 2, 1], bins=[0, 1, 2, 3]) style, equal bins:
    // np.histogram([0, 1, 1, 2, 3], bins=3) -> [1, 2, 2], edges [0, 1, 2, 3]
    let h = histogram(&[0i32, 1, 1, 2, 3], 3, None).unwrap();
    assert_eq!(h.counts, vec![1, 2, 2]);
    assert_eq!(h.edges, vec![0.0, 1.0, 2.0, 3.0]);
    // Constant data: range widened by 0.5 each side.
    let h = histogram(&[5u16; 4], 2, None).unwrap();
    assert_eq!((h.counts, h.edges), (vec![0, 4], vec![4.5, 5.0, 5.5]));
    // Out-of-range and NaN values are dropped with an explicit range.
    let h = histogram(&[f64::NAN, -1.0, 0.0, 0.5, 1.0, 2.0], 2, Some((0.0, 1.0))).unwrap();
    assert_eq!(h.counts, vec![1, 2]);
    assert!(histogram(&[1.0, f64::INFINITY], 2, None).is_err());
    assert!(histogram(&[1.0], 0, None).is_err());
    assert!(histogram(&[1.0], 2, Some((1.0, 0.0))).is_err());
    let h = histogram::<f64>(&[], 2, None).unwrap();
    assert_eq!((h.counts, h.edges), (vec![0, 0], vec![0.0, 0.5, 1.0]));
}

#[test]
fn mapped_file_raw_and_npy() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let raw = dir.path().join("a.bin");
    let vals: Vec<i16> = vec![5, -3, 9, 0, 2];
    let mut f = std::fs::File::create(&raw).unwrap();
    f.write_all(&[0u8; 4]).unwrap();
    f.write_all(bytemuck::cast_slice(&vals)).unwrap();
    drop(f);
    let a = MappedArray::open(&raw, Some(DType::I16), 4, None).unwrap();
    assert_eq!(a.with(|d| crate::with_data!(d, |s| median(s, false))).unwrap(), 2.0);
    let a = MappedArray::open(&raw, Some(DType::I16), 4, Some(2)).unwrap();
    assert_eq!(a.with(|d| d.len()).unwrap(), 2);
    // Odd byte count and misalignment are clear errors.
    assert!(MappedArray::open(&raw, Some(DType::I16), 3, None).unwrap().with(|_| ()).is_err());

    let npy = dir.path().join("a.npy");
    let header = crate::store::npy::Header::new("<f8", vec![3]);
    let mut bytes = header.encode().unwrap();
    bytes.extend_from_slice(bytemuck::cast_slice(&[1.0f64, 3.0, 2.0, 99.0])); // 99: reserved capacity past the shape
    std::fs::write(&npy, bytes).unwrap();
    let a = MappedArray::open(&npy, None, 0, None).unwrap();
    assert_eq!(a.dtype(), DType::F64);
    assert_eq!(a.with(|d| crate::with_data!(d, |s| median(s, false))).unwrap(), 2.0);
    assert!(MappedArray::open(&raw, None, 0, None).is_err());
    assert!(
        "<i2".parse::<DType>().is_ok()
            && ">i2".parse::<DType>().is_err()
            && "complex64".parse::<DType>().is_err()
    );
}

/// `Threads::install` is the stats' thread control: every result is the
/// same on 1, 2 and 3 workers (and several chunks of work each).
#[test]
fn results_do_not_depend_on_the_thread_count() {
    use crate::exec::Threads;
    let n = 2 * CHUNK + 12_345;
    let ints: Vec<i64> = (0..n as i64).map(|i| (i * 7_919) % 100_003 - 50_000).collect();
    let floats: Vec<f32> = ints.iter().map(|&i| i as f32 / 7.0).collect();
    let shorts: Vec<u16> = ints.iter().map(|&i| i as u16).collect();
    fn all<T: Element>(v: &[T]) -> String {
        format!(
            "{:?} {:?} {:?} {:?} {:?} {:?} {:?}",
            median(v, false),
            quantiles(v, &[0.0, 0.1, 0.5, 0.99], Method::Linear, false).unwrap(),
            histogram(v, 13, None).map(|h| h.counts),
            min(v, false).unwrap(),
            max(v, false).unwrap(),
            sum(v, false),
            mean(v, false),
        )
    }
    let want = Threads::ONE.install(|| [all(&ints), all(&floats), all(&shorts)]).unwrap();
    for t in [2, 3] {
        let t = Threads::from(t);
        assert_eq!(t.install(|| [all(&ints), all(&floats), all(&shorts)]).unwrap(), want, "{t}");
    }
}

// ---------------------------------------------------------------- the pread source

use super::source::{Elements, Reader, Streamed};
use crate::scan::source::Source;

/// Every statistic of `src`, as text (exact values, `{:?}` of floats).
fn all_of<T: Element, S: Elements<T> + ?Sized>(src: &S, float_sums: bool) -> String {
    let q = [0.0, 0.1, 0.25, 0.5, 0.9, 1.0];
    let r = |m| quantiles_in(src, &q, m, false, false).ok();
    let sum = sum_count_in(src, false).unwrap();
    let sum_nan = sum_count_in(src, true).unwrap();
    let sums = if float_sums {
        format!("{sum:?} {sum_nan:?} {:?} {:?}", mean_in(src, false), mean_in(src, true))
    } else {
        String::new()
    };
    format!(
        "{:?} {:?} | {:?} {:?} {:?} {:?} | {:?} {:?} {:?} {:?} | {:?} {:?} | {} {} {}",
        median_in(src, false).unwrap(),
        median_in(src, true).unwrap(),
        r(Method::Linear),
        r(Method::InvertedCdf),
        quantiles_in(src, &q, Method::Linear, false, true).ok(),
        quantiles_in(src, &[0.5, 0.25], Method::InvertedCdf, true, false).ok(),
        extreme_in(src, false, false).ok(),
        extreme_in(src, false, true).ok(),
        extreme_in(src, true, false).ok(),
        extreme_in(src, true, true).ok(),
        hist::histogram_in(src, 13, None).map(|h| h.counts).ok(),
        hist::histogram_in(src, 7, Some((-50.0, 50.0))).map(|h| (h.counts, h.edges)).ok(),
        sum.1,
        sum_nan.1,
        sums,
    )
}

/// Writes `v` to a file after `pad` bytes and opens it for `pread`.
fn read_source<T: Element>(v: &[T], pad: usize) -> (tempfile::TempDir, Source) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.bin");
    let mut bytes = vec![0xA5u8; pad];
    bytes.extend_from_slice(bytemuck::cast_slice(v));
    std::fs::write(&path, &bytes).unwrap();
    let file = std::fs::File::open(&path).unwrap();
    (dir, Source::Read { file, len: bytes.len() as u64, path })
}

/// The streamed source gives exactly the slice's results: any block size
/// (tiny ones cut chunks, so float sums are compared only when blocks are
/// whole chunks), any offset, 1 and 3 workers.
fn check_streamed<T: Element>(v: &[T], blocks: &[usize]) {
    use crate::exec::Threads;
    let size = std::mem::size_of::<T>();
    for pad in [0, size, 3 * size + 8] {
        let (_dir, src) = read_source(v, pad);
        for &block in blocks {
            let whole = block % CHUNK == 0;
            let want = Threads::ONE.install(|| all_of(v, whole)).unwrap();
            for t in [1, 3] {
                let got = Threads::from(t)
                    .install(|| {
                        all_of(&Streamed::<T>::with_block(&src, pad as u64, v.len(), block), whole)
                    })
                    .unwrap();
                assert_eq!(got, want, "block {block}, pad {pad}, {t} threads");
            }
        }
    }
    // A caller's reader (the binding's copies of a Python buffer) likewise.
    let bytes: &[u8] = bytemuck::cast_slice(v);
    let read = |at: usize, dst: &mut [u8]| dst.copy_from_slice(&bytes[at..at + dst.len()]);
    let reader = Reader(&read);
    for &block in blocks {
        let whole = block % CHUNK == 0;
        let want = Threads::ONE.install(|| all_of(v, whole)).unwrap();
        for t in [1, 3] {
            let got = Threads::from(t)
                .install(|| {
                    all_of(
                        &Streamed::<T, Reader<'_>>::with_block(&reader, 0, v.len(), block),
                        whole,
                    )
                })
                .unwrap();
            assert_eq!(got, want, "reader, block {block}, {t} threads");
        }
    }
}

/// [`Input::copied`] gives [`Input::Memory`]'s results through the public API.
#[test]
fn copied_input_equals_memory() {
    let v: Vec<f64> = (0..100_000).map(|i| ((i * 7919) % 1000) as f64 - 499.5).collect();
    let bytes: &[u8] = bytemuck::cast_slice(&v);
    let read = |at: usize, dst: &mut [u8]| dst.copy_from_slice(&bytes[at..at + dst.len()]);
    let mem = Input::from(Data::from(&v[..]));
    let copied = Input::copied(DType::F64, v.len(), &read);
    assert_eq!(copied.len(), v.len());
    assert_eq!(copied.dtype(), DType::F64);
    let q = [0.0, 0.3, 0.5, 1.0];
    assert_eq!(copied.median(false).unwrap(), mem.median(false).unwrap());
    assert_eq!(copied.mean(false).unwrap(), mem.mean(false).unwrap());
    assert_eq!(
        format!("{:?}", copied.sum(false).unwrap()),
        format!("{:?}", mem.sum(false).unwrap())
    );
    assert_eq!(
        copied.quantiles(&q, Method::Linear, false, false).unwrap(),
        mem.quantiles(&q, Method::Linear, false, false).unwrap()
    );
    assert_eq!(copied.max(false).unwrap(), mem.max(false).unwrap());
}

macro_rules! streamed_props {
    ($($name:ident: $values:expr;)*) => {
        proptest! {
            #![proptest_config(ProptestConfig::with_cases(if cfg!(debug_assertions) { 16 } else { 48 }))]
            $(
                #[test]
                fn $name(v in prop::collection::vec($values, 0..300)) { check_streamed(&v, &[1, 2, 7, 64, CHUNK]) }
            )*
        }
    };
}

streamed_props! {
    streamed_i8: any::<i8>();
    streamed_u8: any::<u8>();
    streamed_i16: any::<i16>();
    streamed_i16_narrow: -3i16..3;
    streamed_u16: any::<u16>();
    streamed_i32: any::<i32>();
    streamed_u32: any::<u32>();
    streamed_i64: any::<i64>();
    streamed_u64: any::<u64>();
    streamed_f32: prop_oneof![any::<f32>(), Just(f32::NAN), -100f32..100.0];
    streamed_f64: prop_oneof![any::<f64>(), Just(f64::NAN), Just(f64::INFINITY), -100f64..100.0];
}

/// Several chunks, a partial last one, and blocks that are and are not
/// whole chunks: 16-bit (the window path on the slice, one counting pass
/// streamed), 32-bit (radix selection: a second pass), floats (sums).
#[test]
fn streamed_equals_mapped_on_several_chunks() {
    let n = 2 * CHUNK + 12_345;
    let ints: Vec<i64> = (0..n as i64).map(|i| (i * 7_919) % 100_003 - 50_000).collect();
    let shorts: Vec<i16> = ints.iter().map(|&i| i as i16).collect();
    let words: Vec<u32> = ints.iter().map(|&i| (i * 40_503) as u32).collect();
    let floats: Vec<f32> = ints.iter().map(|&i| i as f32 / 7.0).collect();
    let blocks = [CHUNK, 3 * CHUNK, CHUNK / 3 + 1];
    check_streamed(&shorts, &blocks);
    check_streamed(&words, &blocks);
    check_streamed(&floats, &blocks);
    check_streamed(&ints, &blocks[..1]);
}

#[test]
fn array_file_strategies_agree_and_auto_follows_the_cache() {
    use crate::scan::Strategy;
    let dir = tempfile::tempdir().unwrap();
    let raw = dir.path().join("a.bin");
    let vals: Vec<i16> =
        (0..300_001).map(|i: i64| ((i * 7_919) % 60_007 - 30_000) as i16).collect();
    let mut bytes = vec![0u8; 6];
    bytes.extend_from_slice(bytemuck::cast_slice(&vals));
    std::fs::write(&raw, &bytes).unwrap();
    let stats = |s: Strategy, count: Option<u64>| {
        let a = ArrayFile::open(&raw, Some(DType::I16), 6, count, s).unwrap();
        let got = a
            .with(|d| {
                format!(
                    "{:?} {:?} {:?} {:?} {:?} {:?} {:?}",
                    d.median(false),
                    d.quantiles(&[0.1, 0.5], Method::Linear, false, false),
                    d.min(false),
                    d.max(false),
                    d.sum(false),
                    d.mean(false),
                    d.histogram(5, None).map(|h| h.counts)
                )
            })
            .unwrap();
        (a.strategy(), got)
    };
    let (s, want) = stats(Strategy::Mmap, None);
    assert_eq!(s, Strategy::Mmap);
    assert_eq!(stats(Strategy::Read, None), (Strategy::Read, want.clone()));
    assert_eq!(stats(Strategy::Read, Some(1_001)).1, stats(Strategy::Mmap, Some(1_001)).1);
    // In the page cache (pinned there: memory pressure from other processes
    // must not evict it before auto looks, issue 27), auto maps; evicted,
    // it reads.
    let pin = crate::map::Map::open(&raw, crate::map::Mode::Read).unwrap();
    pin.lock().expect("mlock 600 kB (root, or RLIMIT_MEMLOCK of 1 MiB or more)");
    assert_eq!(stats(Strategy::Auto, None), (Strategy::Mmap, want.clone()));
    drop(pin);
    crate::info::evict(&raw).unwrap();
    if crate::info::file_info(&raw).unwrap().resident_fraction() < 0.5 {
        assert_eq!(stats(Strategy::Auto, None), (Strategy::Read, want));
    }
    // The same checks whichever the source: misaligned data is an error.
    for s in [Strategy::Mmap, Strategy::Read] {
        assert!(ArrayFile::open(&raw, Some(DType::I16), 5, Some(4), s)
            .unwrap()
            .with(|_| ())
            .is_err());
    }
    // A file truncated under the reader is an error, not a wrong answer.
    let a = ArrayFile::open(&raw, Some(DType::I16), 6, None, Strategy::Read).unwrap();
    std::fs::OpenOptions::new().write(true).open(&raw).unwrap().set_len(1_000).unwrap();
    let err = a.with(|d| d.median(false)).unwrap().unwrap_err();
    assert!(err.to_string().contains("a.bin"), "{err}");
}

proptest! {
    /// The vector window kernel (16-bit integers) counts exactly what the
    /// scalar one does, for any window (at the bottom, the top, the whole range).
    #[test]
    fn window_kernel_matches_scalar(v in prop::collection::vec(any::<i16>(), 0..10_000), lo in 0u64..65536, w in 1u64..70000) {
        let w = w.min(65536 - lo) as usize;
        let (mut a, mut b) = (vec![0u64; w], vec![0u64; w]);
        let below = window_count(&v, lo, &mut a);
        prop_assert_eq!(below, window_count_scalar(&v, lo, &mut b));
        prop_assert_eq!(a, b);
        let u: Vec<u16> = v.iter().map(|&x| x as u16).collect();
        let (mut a, mut b) = (vec![0u64; w], vec![0u64; w]);
        prop_assert_eq!(window_count(&u, lo, &mut a), window_count_scalar(&u, lo, &mut b));
        prop_assert_eq!(a, b.clone());
        // Each vector kernel the CPU has, whichever the dispatch picks.
        #[cfg(target_arch = "x86_64")]
        {
            use crate::sys::simd::{window_count_with, Kernel};
            for k in [Kernel::Avx2, Kernel::Avx512] {
                let mut a = vec![0u64; w];
                if let Some(below) = window_count_with(k, &u, 0, lo as u16, &mut a) {
                    prop_assert_eq!((below, &a), (window_count_scalar(&u, lo, &mut vec![0u64; w]), &b));
                }
            }
        }
    }
}

/// A `.npy` file of `vals` (1-d).
fn npy_of<T: Element + bytemuck::Pod>(path: &std::path::Path, dtype: &str, vals: &[T]) {
    let mut bytes =
        crate::store::npy::Header::new(dtype, vec![vals.len() as u64]).encode().unwrap();
    bytes.extend_from_slice(bytemuck::cast_slice(vals));
    std::fs::write(path, bytes).unwrap();
}

/// The header and the data come from one file: replacing the name right
/// after the header was read (as `ArrayStore::create` does, by rename)
/// does not mix the old header with the new file's bytes.
#[test]
fn mapped_array_reads_header_and_data_from_one_inode() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.npy"), dir.path().join("b.npy"));
    npy_of(&a, "<i2", &[1i16, 2, 3, 4]);
    npy_of(&b, "<f8", &[9.5f64; 8]);
    let (from, to) = (b.clone(), a.clone());
    super::data::AFTER_HEADER
        .with(|h| *h.borrow_mut() = Some(Box::new(move || std::fs::rename(from, to).unwrap())));
    let m = MappedArray::open(&a, None, 0, None).unwrap();
    assert!(!b.exists(), "the hook ran");
    assert_eq!(m.dtype(), DType::I16);
    let got = m.with(|d| match d {
        Data::I16(s) => s.to_vec(),
        other => panic!("{other:?}"),
    });
    assert_eq!(got.unwrap(), [1, 2, 3, 4]);
}

/// A FIFO given as an array file is refused without being read (and
/// without blocking when nobody writes to it): its bytes stay for whoever
/// reads it next.
#[test]
fn mapped_array_never_reads_a_fifo() {
    use std::io::{Read, Write};
    use std::os::unix::fs::OpenOptionsExt;
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("fifo");
    assert!(std::process::Command::new("mkfifo").arg(&p).status().unwrap().success());
    // Read-write and non-blocking: holds the FIFO open (so opening it
    // never blocks) and can read back what is left.
    let mut keep = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&p)
        .unwrap();
    keep.write_all(b"\x93NUMPY\x01\x00").unwrap();
    for dtype in [None, Some(DType::U8)] {
        let e = MappedArray::open(&p, dtype, 0, None).unwrap_err();
        assert_eq!((e.kind(), e.path()), (crate::ErrorKind::NotAFile, Some(p.as_path())), "{e}");
        let e = ArrayFile::open(&p, dtype, 0, Some(4), crate::scan::Strategy::Read).unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::NotAFile, "{e}");
    }
    let mut left = [0u8; 16];
    assert_eq!(keep.read(&mut left).unwrap(), 8, "nothing was read from the FIFO");
}

#[test]
fn a_dtype_conflicting_with_the_header_names_the_file_in_the_path_field() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.npy");
    npy_of(&a, "<i2", &[1i16, 2]);
    let e = MappedArray::open(&a, Some(DType::F64), 0, None).unwrap_err();
    assert_eq!((e.kind(), e.path()), (crate::ErrorKind::InvalidArgument, Some(a.as_path())), "{e}");
    assert!(!e.message().contains(a.to_str().unwrap()), "{e}");
}
