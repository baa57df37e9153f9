//! Tests of `replace` and `keep_lines` against naive references, over
//! every strategy, thread count and window size.

use std::fs;

use proptest::prelude::{
    any, prop_assert, prop_assert_eq, prop_oneof, proptest, Just, ProptestConfig, TestCaseError,
};
use proptest::strategy::Strategy as Gen;
use regex::bytes::Regex;

use super::*;
use crate::sys::simd::replace_byte;
use crate::test_util::{
    naive_replace, old_mtime, scan_matrix, temp_file, temp_files, CHUNKS, STRATEGIES,
};
use crate::ErrorKind;

/// Strategies × threads × window sizes.
fn configs() -> Vec<ScanOptions> {
    scan_matrix(&STRATEGIES, &CHUNKS)
}

/// `sed 's/RE/REP/g'`: each line (without its newline) on its own.
fn naive_regex(hay: &[u8], re: &Regex, rep: &[u8]) -> (Vec<u8>, u64) {
    let mut out = Vec::new();
    let mut n = 0;
    for line in hay.split_inclusive(|&b| b == b'\n') {
        let body = line.strip_suffix(b"\n").unwrap_or(line);
        n += re.find_iter(body).count() as u64;
        out.extend_from_slice(&re.replace_all(body, rep));
        if body.len() < line.len() {
            out.push(b'\n');
        }
    }
    (out, n)
}

/// Runs `replace` in every configuration and compares with `expect`.
fn check_all(
    data: &[u8],
    pat: &[u8],
    rep: &[u8],
    regex: bool,
    expect: &(Vec<u8>, u64),
) -> std::result::Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f.txt");
    let in_place = !regex && pat.len() == rep.len();
    for opts in configs() {
        fs::write(&path, data).unwrap();
        let ro = ReplaceOptions { fixed: !regex, ..Default::default() };
        let r = replace(&path, pat, rep, &ro, &opts).unwrap();
        let got = fs::read(&path).unwrap();
        prop_assert_eq!(
            &got,
            &expect.0,
            "{:?} file with {:?}",
            String::from_utf8_lossy(&got),
            opts
        );
        prop_assert_eq!(r.replacements, expect.1, "{:?}", opts);
        prop_assert_eq!(r.in_place, in_place);
        prop_assert!(temp_files(dir.path()).is_empty());
    }
    // A dry run counts the same and writes nothing.
    fs::write(&path, data).unwrap();
    let t = old_mtime(&path);
    let ro = ReplaceOptions { fixed: !regex, dry_run: true, ..Default::default() };
    for opts in configs().into_iter().step_by(3) {
        let r = replace(&path, pat, rep, &ro, &opts).unwrap();
        prop_assert_eq!(r.replacements, expect.1);
        prop_assert_eq!(r.bytes_written, 0);
    }
    prop_assert_eq!(fs::read(&path).unwrap(), data);
    prop_assert_eq!(fs::metadata(&path).unwrap().modified().unwrap(), t);
    Ok(())
}

fn data() -> impl Gen<Value = Vec<u8>> {
    // Mostly a, b and commas (many matches, borders) with CRLF and LF lines.
    let byte = prop_oneof![6 => Just(b'a'), 4 => Just(b'b'), 2 => Just(b','), 1 => Just(b'\n'), 1 => Just(b'\r')];
    proptest::collection::vec(byte, 0..160)
}

fn needle() -> impl Gen<Value = Vec<u8>> {
    prop_oneof![
        Just(b"a".to_vec()),
        Just(b"aa".to_vec()),
        Just(b"aba".to_vec()),
        Just(b"ab".to_vec()),
        Just(b",".to_vec()),
        Just(b"\r\n".to_vec()),
        Just(b"aaa".to_vec()),
        proptest::collection::vec(prop_oneof![Just(b'a'), Just(b'b'), Just(b',')], 1..5),
    ]
}

fn replacement() -> impl Gen<Value = Vec<u8>> {
    proptest::collection::vec(prop_oneof![Just(b'x'), Just(b'a'), Just(b';'), Just(b'\n')], 0..6)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]

    #[test]
    fn literal_matches_bytes_replace(data in data(), pat in needle(), other in replacement(), seed in any::<u8>()) {
        // Same length (in place) ...
        let same: Vec<u8> = pat.iter().enumerate().map(|(i, &b)| if (seed as usize + i).is_multiple_of(2) { b'x' } else { b }).collect();
        check_all(&data, &pat, &same, false, &naive_replace(&data, &pat, &same))?;
        // ... and a different length (rewrite).
        let mut rep = other;
        if rep.len() == pat.len() {
            rep.push(b'y');
        }
        check_all(&data, &pat, &rep, false, &naive_replace(&data, &pat, &rep))?;
    }

    #[test]
    fn regex_matches_per_line_replace(data in data(), which in 0usize..12, rep in 0usize..6) {
        const RES: [&str; 12] = ["a", "a+", "b|ab", "(a)(b)?", "x*", "^a", "a$", "\r$", "[ab],", "(?P<w>a)b", "b*", "^$"];
        const REPS: [&str; 6] = ["X", "", "$1<", "${1}-$0", "[$0]", "${w}z"];
        let re = Regex::new(RES[which]).unwrap();
        let rep = REPS[rep].as_bytes();
        let missing = (rep.windows(2).any(|w| w == b"$1") || rep.windows(3).any(|w| w == b"{1}")) && re.captures_len() < 2
            || rep.windows(3).any(|w| w == b"{w}") && !re.capture_names().flatten().any(|n| n == "w");
        if missing {
            // A reference to a group the regex lacks is refused, file untouched.
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("d");
            fs::write(&path, &data).unwrap();
            let ro = ReplaceOptions::default();
            let r = replace(&path, RES[which].as_bytes(), rep, &ro, &ScanOptions::default());
            prop_assert!(matches!(r, Err(Error::InvalidArgument(_))), "{:?}", r);
            prop_assert_eq!(fs::read(&path).unwrap(), data);
        } else {
            check_all(&data, RES[which].as_bytes(), rep, true, &naive_regex(&data, &re, rep))?;
        }
    }
}

/// A regex `replace` of a file holding `content`, default scan options:
/// the report and the file's bytes after.
fn regex_replace_once(content: &[u8], pat: &[u8], rep: &[u8]) -> (ReplaceReport, Vec<u8>) {
    let (_dir, path) = temp_file(content);
    let ro = ReplaceOptions::default();
    let r = replace(&path, pat, rep, &ro, &ScanOptions::default()).unwrap();
    (r, fs::read(&path).unwrap())
}

#[test]
fn regex_same_length_still_rewrites() {
    let (r, after) = regex_replace_once(b"a,b\nc,d\n", b",", b";");
    assert_eq!(r, ReplaceReport { replacements: 2, in_place: false, bytes_written: 8 });
    assert_eq!(after, b"a;b\nc;d\n");
}

#[test]
fn captures_and_names() {
    let (r, after) =
        regex_replace_once(b"k1=v1\nk2=v2\r\nnone\nk3=v3", br"(?P<k>\w+)=(\w+)", b"$2=${k} $$");
    assert_eq!(r.replacements, 3);
    assert_eq!(after, b"v1=k1 $\nv2=k2 $\r\nnone\nv3=k3 $");
}

#[test]
fn bad_arguments_and_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    fs::write(&path, "abc").unwrap();
    let o = ScanOptions::default();
    let lit = ReplaceOptions::default().fixed(true);
    let re = ReplaceOptions::default();
    assert!(matches!(replace(&path, b"", b"x", &lit, &o), Err(Error::InvalidArgument(_))));
    assert!(matches!(replace(&path, b"", b"x", &re, &o), Err(Error::InvalidArgument(_))));
    match replace(&path, b"a(", b"x", &re, &o) {
        Err(Error::InvalidArgument(m)) => {
            assert!(m.contains("invalid regex") && m.contains("unclosed"), "{m}")
        }
        other => panic!("{other:?}"),
    }
    let missing = dir.path().join("missing");
    let e = replace(&missing, b"a", b"b", &lit, &o).unwrap_err();
    assert!(e.to_string().contains("missing") && e.to_string().contains("No such file"), "{e}");
    assert_eq!(e.path(), Some(missing.as_path()));
    let e = replace(dir.path(), b"a", b"bb", &lit, &o).unwrap_err();
    assert!(e.to_string().contains("Is a directory"), "{e}");
    let e = keep_lines(dir.path(), 1, &o).unwrap_err();
    assert!(e.to_string().contains("Is a directory"), "{e}");
    let e = keep_lines(&missing, 1, &o).unwrap_err();
    assert!(e.to_string().contains("No such file"), "{e}");
    let e = replace("/dev/null", b"a", b"b", &lit, &o).unwrap_err();
    assert!(e.to_string().contains("not a regular file"), "{e}");
    let bad = ReplaceOptions { fixed: true, backup: Some("/x".into()), ..Default::default() };
    assert!(matches!(replace(&path, b"a", b"b", &bad, &o), Err(Error::InvalidArgument(_))));
    assert_eq!(fs::read(&path).unwrap(), b"abc");
}

#[test]
fn empty_file_and_no_match_are_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    for (content, pat, rep, regex) in [
        (&b""[..], &b"a"[..], &b"b"[..], false),
        (b"", b"a", b"bb", false),
        (b"", b"a", b"b", true),
        (b"xyz\n", b"a", b"b", false),
        (b"xyz\n", b"a", b"bb", false),
        (b"xyz\n", b"a+", b"b", true),
    ] {
        for strategy in STRATEGIES {
            fs::write(&path, content).unwrap();
            let t = old_mtime(&path);
            let ro = ReplaceOptions {
                fixed: !regex,
                backup: Some(".bak".into()),
                sync: true,
                ..Default::default()
            };
            let r = replace(&path, pat, rep, &ro, &ScanOptions::new(strategy, 2)).unwrap();
            assert_eq!((r.replacements, r.bytes_written), (0, 0));
            assert_eq!(fs::metadata(&path).unwrap().modified().unwrap(), t);
            assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1, "no temporary or backup file");
        }
    }
}

#[test]
fn backups_keep_the_original() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f.csv");
    let bak = dir.path().join("f.csv.orig");
    for (rep, in_place) in [(&b";"[..], true), (b", ", false)] {
        for strategy in STRATEGIES {
            fs::write(&bak, "an older backup").unwrap();
            fs::write(&path, "a,b\nc,d\n").unwrap();
            let ro = ReplaceOptions {
                fixed: true,
                backup: Some(".orig".into()),
                sync: true,
                ..Default::default()
            };
            let r = replace(&path, b",", rep, &ro, &ScanOptions::new(strategy, 2)).unwrap();
            assert_eq!((r.replacements, r.in_place), (2, in_place));
            assert_eq!(fs::read(&bak).unwrap(), b"a,b\nc,d\n");
            assert_eq!(fs::read(&path).unwrap(), naive_replace(b"a,b\nc,d\n", b",", rep).0);
            assert!(temp_files(dir.path()).is_empty());
        }
    }
}

#[test]
fn rewrite_keeps_mode_and_follows_links() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("real");
    let link = dir.path().join("link");
    fs::write(&path, "a-b-c").unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o640)).unwrap();
    std::os::unix::fs::symlink("real", &link).unwrap();
    let r = replace(
        &link,
        b"-",
        b"--",
        &ReplaceOptions::default().fixed(true),
        &ScanOptions::default(),
    )
    .unwrap();
    assert_eq!(r, ReplaceReport { replacements: 2, in_place: false, bytes_written: 7 });
    assert_eq!(fs::read(&path).unwrap(), b"a--b--c");
    assert!(fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
    assert_eq!(fs::metadata(&path).unwrap().permissions().mode() & 0o7777, 0o640);
}

/// A `0444` file in a writable directory is rewritten like `sed -i` does
/// (mode kept). Root may write it anyway: then the same-length edit stays
/// in place; the content and mode are checked either way.
#[test]
fn read_only_file_is_rewritten_keeping_its_mode() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ro");
    fs::write(&path, "a-b-c").unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o444)).unwrap();
    let writable = fs::OpenOptions::new().write(true).open(&path).is_ok();
    let lit = ReplaceOptions::default().fixed(true);
    for (pat, rep, want, in_place) in
        [(&b"-"[..], &b"+"[..], &b"a+b+c"[..], writable), (b"+", b"--", b"a--b--c", false)]
    {
        let ino = fs::metadata(&path).unwrap().ino();
        let r = replace(&path, pat, rep, &lit, &ScanOptions::default()).unwrap();
        assert_eq!((r.replacements, r.in_place), (2, in_place));
        assert_eq!(fs::read(&path).unwrap(), want);
        let meta = fs::metadata(&path).unwrap();
        assert_eq!(meta.permissions().mode() & 0o7777, 0o444);
        assert_eq!(meta.ino() == ino, in_place, "in place keeps the inode, a rewrite does not");
        assert!(temp_files(dir.path()).is_empty());
    }
}

#[test]
fn in_place_keeps_the_inode_and_hard_links() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    let other = dir.path().join("g");
    for strategy in STRATEGIES {
        fs::write(&path, "x,y,z").unwrap();
        let _ = fs::remove_file(&other);
        fs::hard_link(&path, &other).unwrap();
        let ino = fs::metadata(&path).unwrap().ino();
        let r = replace(
            &path,
            b",",
            b"\t",
            &ReplaceOptions { fixed: true, sync: true, ..Default::default() },
            &ScanOptions::new(strategy, 1),
        )
        .unwrap();
        assert_eq!(r, ReplaceReport { replacements: 2, in_place: true, bytes_written: 2 });
        assert_eq!(fs::metadata(&path).unwrap().ino(), ino);
        assert_eq!(fs::read(&other).unwrap(), b"x\ty\tz");
    }
}

/// Long enough for several default-sized groups and ranges.
#[test]
fn default_windows_on_a_few_mib() {
    let row = b"12345,abc,3.25,xyz,aaaa,\"q\"\r\n";
    let data: Vec<u8> = row.iter().copied().cycle().take(3 << 20).collect();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    for (pat, rep) in [(&b","[..], &b", "[..]), (b"aa", b"b"), (b",", b";")] {
        for strategy in STRATEGIES {
            fs::write(&path, &data).unwrap();
            let r = replace(
                &path,
                pat,
                rep,
                &ReplaceOptions::default().fixed(true),
                &ScanOptions::new(strategy, 3),
            )
            .unwrap();
            let (want, n) = naive_replace(&data, pat, rep);
            assert_eq!(r.replacements, n);
            assert!(fs::read(&path).unwrap() == want, "{pat:?} -> {rep:?} with {strategy:?}");
        }
    }
    fs::write(&path, &data).unwrap();
    let ro = ReplaceOptions::default();
    let r = replace(&path, br"(\d+),", b"<$1>", &ro, &ScanOptions::new(Strategy::Mmap, 3)).unwrap();
    let (want, n) = naive_regex(&data, &Regex::new(r"(\d+),").unwrap(), b"<$1>");
    assert_eq!(r.replacements, n);
    assert!(fs::read(&path).unwrap() == want);
}

#[test]
fn keep_lines_cases() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    let cases: [(&[u8], u64, &[u8]); 9] = [
        (b"a\nb\nc\n", 0, b""),
        (b"a\nb\nc\n", 1, b"a\n"),
        (b"a\nb\nc\n", 2, b"a\nb\n"),
        (b"a\nb\nc\n", 3, b"a\nb\nc\n"),
        (b"a\nb\nc\n", 10, b"a\nb\nc\n"),
        (b"a\nb\nc", 2, b"a\nb\n"),
        (b"a\nb\nc", 3, b"a\nb\nc"),
        (b"", 1, b""),
        (b"\n\n\n", 2, b"\n\n"),
    ];
    for (content, n, want) in cases {
        for opts in configs() {
            fs::write(&path, content).unwrap();
            let t = old_mtime(&path);
            let r = keep_lines(&path, n, &opts).unwrap();
            assert_eq!(fs::read(&path).unwrap(), want, "{content:?} n={n} {opts:?}");
            let truncated = want.len() < content.len();
            assert_eq!(
                r,
                KeepReport { new_len: want.len() as u64, old_len: content.len() as u64, truncated }
            );
            if !truncated {
                assert_eq!(fs::metadata(&path).unwrap().modified().unwrap(), t);
            }
        }
    }
    // Far into a file larger than a window.
    let data: Vec<u8> = (0..200_000u32).flat_map(|i| format!("{i}\n").into_bytes()).collect();
    fs::write(&path, &data).unwrap();
    let r = keep_lines(&path, 150_000, &ScanOptions::new(Strategy::Mmap, 2)).unwrap();
    let want: usize = (0..150_000u32).map(|i| format!("{i}\n").len()).sum();
    assert_eq!(r.new_len, want as u64);
    assert_eq!(fs::read(&path).unwrap(), &data[..want]);
}

#[test]
fn shared_zones() {
    let bounds = [10u64, 20, 23];
    for n in 1..6u64 {
        for lo in 0..30u64 {
            for hi in lo..32 {
                let brute = bounds.iter().any(|&b| (b..b + n - 1).any(|x| (lo..hi).contains(&x)));
                assert_eq!(touches_zone(&bounds, n, lo, hi), brute, "n={n} [{lo}, {hi})");
            }
        }
    }
}

#[test]
fn unknown_capture_groups_are_rejected_before_touching_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g");
    fs::write(&path, "foo bar\n").unwrap();
    let ro = ReplaceOptions::default();
    let o = ScanOptions::default();
    for (pat, rep, names) in [
        (&br"(foo)"[..], &b"$2"[..], "$2"),
        (br"(foo)", b"${2}", "${2}"),
        (br"foo", b"<$1>", "$1"),
        (br"(?P<k>foo)", b"${kk}", "kk"),
        (br"(foo)", b"$1a", "${1}a"),
    ] {
        match replace(&path, pat, rep, &ro, &o) {
            Err(Error::InvalidArgument(m)) => assert!(m.contains(names), "{m}"),
            other => panic!(
                "{:?} -> {:?}: {other:?}",
                String::from_utf8_lossy(pat),
                String::from_utf8_lossy(rep)
            ),
        }
        assert_eq!(fs::read(&path).unwrap(), b"foo bar\n");
    }
    // What exists keeps working: $0, ${0}, names, $$ and a lone $.
    let r = replace(&path, br"(?P<w>o+)", b"[$0|${0}|$w|${1}|$$|$ |$]", &ro, &o).unwrap();
    assert_eq!(r.replacements, 1);
    assert_eq!(fs::read(&path).unwrap(), b"f[oo|oo|oo|oo|$|$ |$] bar\n");
}

/// A truncation by another process during an in-place edit must
/// stop every write; the file keeps the size the truncating process gave
/// it (pwrite past the end used to grow it back with zeros and rewritten
/// stretches).
#[test]
fn truncation_during_in_place_edit_stops_all_writes() {
    use crate::exec::Progress;
    const LEN: usize = 24 << 20;
    const CUT: u64 = 1000;
    let line = b"alpha,beta,gamma,delta,alpha\n";
    let data: Vec<u8> = line.iter().copied().cycle().take(LEN).collect();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("h2");
    let ro = ReplaceOptions::default().fixed(true);
    for strategy in [Strategy::Read, Strategy::Mmap] {
        for threads in [1, 3] {
            let mut caught = 0;
            for _attempt in 0..6 {
                fs::write(&path, &data).unwrap();
                let p = path.clone();
                let counter = Progress::watched_then(1 << 20, move || {
                    fs::OpenOptions::new().write(true).open(&p).unwrap().set_len(CUT).unwrap();
                });
                let opts = ScanOptions {
                    strategy,
                    threads: threads.into(),
                    chunk: 64 << 10,
                    progress: counter,
                };
                let r = replace(&path, b"alpha", b"ALPHA", &ro, &opts);
                let ctx = format!("{strategy:?} x{threads}: {r:?}");
                match &r {
                    Err(Error::Truncated { path: p, .. } | Error::FileTruncated { path: p }) => {
                        assert_eq!(p, &path, "{ctx}");
                        caught += 1;
                    }
                    Ok(_) => {} // finished before the cut
                    Err(e) => panic!("unexpected error {e} ({ctx})"),
                }
                assert_eq!(fs::metadata(&path).unwrap().len(), CUT, "the file grew back ({ctx})");
                let head = fs::read(&path).unwrap();
                assert!(head.iter().all(|&b| b != 0), "zeros in what is left ({ctx})");
            }
            assert!(caught > 0, "{strategy:?} x{threads}: the truncation was never seen mid-edit");
        }
    }
}

#[test]
fn proc_files_are_refused_not_silently_unmatched() {
    let o = ScanOptions::default();
    for ro in [
        ReplaceOptions::default().fixed(true),
        ReplaceOptions { fixed: true, dry_run: true, ..Default::default() },
    ] {
        match replace("/proc/meminfo", b"MemTotal", b"MemTotaX", &ro, &o) {
            Err(e) => assert_eq!(
                (e.kind(), e.path()),
                (ErrorKind::NotAFile, Some(Path::new("/proc/meminfo"))),
                "{e}"
            ),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(keep_lines("/proc/meminfo", 1, &o).unwrap_err().kind(), ErrorKind::NotAFile);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// The one-byte kernel (16-byte blocks and the scalar tail) against the
    /// naive loop, with dense and sparse matches, replacements of 0 to 20
    /// bytes (past 16: the scalar path), appended after existing bytes.
    #[test]
    fn replace_byte_matches_naive(
        data in proptest::collection::vec(prop_oneof![8 => any::<u8>(), 3 => Just(b','), 1 => Just(b'\n')], 0..700),
        rep in proptest::collection::vec(any::<u8>(), 0..21),
        prefix in proptest::collection::vec(any::<u8>(), 0..3),
        sparse in any::<bool>(),
    ) {
        let data: Vec<u8> = if sparse { data.iter().map(|&b| if b == b',' { b'.' } else { b }).collect() } else { data };
        let (want, n) = naive_replace(&data, b",", &rep);
        let mut out = prefix.clone();
        let got = replace_byte(&data, b',', &rep, &mut out);
        prop_assert_eq!(got, n);
        prop_assert_eq!(&out[..prefix.len()], &prefix[..]);
        prop_assert_eq!(&out[prefix.len()..], &want[..]);
    }
}

/// The user's spelling decides regex or literal: `fixed` is always
/// literal; a regex without metacharacters is matched as a literal unless
/// the replacement refers to groups (`$`); anything else stays a regex.
#[test]
fn for_pattern_picks_literal_only_when_the_matches_are_the_same() {
    let regex = |p: &[u8], r: &[u8], fixed| !ReplaceOptions::for_pattern(p, r, fixed).fixed;
    assert!(!regex(b"a.b", b"x", true));
    assert!(!regex(b"$1", b"$1", true));
    assert!(!regex(b"abc", b"xyz", false));
    assert!(!regex("é,".as_bytes(), b";", false));
    assert!(regex(b"abc", b"$0", false), "the replacement expands $");
    assert!(regex(b"abc", b"$$", false), "$$ is one $ in regex mode");
    for meta in [&b"a.c"[..], b"a+", b"^a", b"a$", b"(a)", b"a|b", b"[a]", b"a\\d", b"a\nb", b""] {
        assert!(regex(meta, b"x", false), "{:?}", String::from_utf8_lossy(meta));
    }
    // Not UTF-8: the regex refuses it, so the literal path must not accept it.
    assert!(regex(b"\xff", b"x", false));
    // Same result either way on a file where the difference would show.
    let (_dir, path) = temp_file(b"abc\nxabcx\n");
    let o = ReplaceOptions::for_pattern(b"abc", b"XYZ", false);
    let r = replace(&path, b"abc", b"XYZ", &o, &ScanOptions::default()).unwrap();
    assert_eq!((r.replacements, r.in_place), (2, true));
    assert_eq!(fs::read(&path).unwrap(), b"XYZ\nxXYZx\n");
}

#[test]
fn plain_literals() {
    for (p, plain) in [
        (",", true),
        ("abc def", true),
        ("é", true),
        ("a.b", false),
        ("a+", false),
        (r"\d", false),
        ("", false),
        ("a\nb", false),
    ] {
        assert_eq!(is_plain_literal(p.as_bytes()), plain, "{p:?}");
    }
}
