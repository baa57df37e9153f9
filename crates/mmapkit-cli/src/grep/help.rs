//! `mmapkit grep --help`'s long text: what GNU grep behaviour is kept, and examples.

pub const GREP_HELP: &str = "\
Output is GNU grep's (LC_ALL=C), byte for byte, for these options:
'path:' when several files are searched (or -H, or files found by -r),
then 'N:' with -n, 'offset:' with -b (of the line, or of the match with
-o), then the line; context lines (-A/-B/-C) use '-' for ':' and groups
are separated by '--'; -c prints one count per file, -l/-L file names.
--color uses GNU grep's default GREP_COLORS. Files are searched in
parallel inside, in line-aligned ranges (on one thread per file with
context); output stays in file order.

Patterns use the Rust regex crate's syntax, close to grep -E and ripgrep:
-E is implied (GNU grep's default is -G, basic regexes: give -G for them;
-F for literals; two of -E, -F, -G are \"conflicting matchers\"). Where
the two meet, GNU grep's reading wins: '{' is a literal where no interval
starts, x{,3} is x{0,3}, bracket expressions take only POSIX class names
([[.c.]] and [[=c=]] are c), and a bad one is GNU's error. Patterns
are bytes (they need not be UTF-8). One byte rule, GNU grep's under
LC_ALL=C, shared with 'mmapkit replace': '.', \\w, \\b and [[:alpha:]]-style
classes are ASCII, -i folds ASCII letters only, a non-ASCII literal matches
its bytes ((?u) turns Unicode classes on). A match never spans lines; -o
and --color show GNU grep's matches: POSIX leftmost-longest over all the
patterns (for 'a|ab', 'ab'). -f FILE reads one pattern per line (an empty FILE matches
nothing); -NUM is -C NUM; -y is -i.

-P: the pattern is a Perl-compatible regex (PCRE2, with its JIT), as GNU
grep -P: lookarounds, \\K, back-references, lazy and possessive
quantifiers. Each line is matched alone (lookbehinds, ^, $, \\A and \\z see
only it). The same byte rule: UTF mode is off, '.', \\w, \\d, \\b and -i are
ASCII and bytes; (?u) is not PCRE2 syntax (an error), (*UTF) or (*UCP) at
the start of the pattern turns UTF-8 on, and a line that is not UTF-8 is
then an error. One pattern only: -e a -e b, a pattern with a newline or a
pattern file of several lines exit 2 ('the -P option only supports a
single pattern'), as GNU grep does. -w is (?<!\\w)(?:P)(?!\\w), -x
^(?:P)\\z. A pattern PCRE2 refuses exits 2 naming it; a match that hits
PCRE2's limits (catastrophic backtracking) is an error of that file (exit
2), never a silent non-match. With -z, $ also matches before a record's
final newline (GNU grep sets PCRE2_DOLLAR_ENDONLY; use \\z).

Binary files, as GNU grep 3.8 decides: the file is read in 96 KiB buffers
and is binary from the buffer holding its first NUL byte on (a file with
holes, from the start). From there a NUL byte ends lines, and no selected
line is printed: the search stops at the first and 'FILE: binary file
matches' goes to standard error (stdin is '(standard input)'). Lines of
earlier buffers print as usual; -c, -l, -L and -q count the NUL-ended
lines. -a (--binary-files=text) treats NUL as data, -I
(--binary-files=without-match) counts a binary file as not matching; the
last of these given wins. -U is accepted (no effect). -z: lines end in NUL
on input and output (no binary rule); -Z: a NUL after file names.
-T aligns output with a tab (numbers padded as GNU grep pads them).
-r searches the files under directories on several walking threads (-j
N: N; auto: one per core, at least 8, which keep disk reads in flight
when the tree is not cached): each file is
searched whole on the thread that found it (files of 4 MiB and more are
split across cores) and its output printed whole, files in the order
they are done; --sort=path prints them in name order (one walking
thread), -j 1 in GNU grep's order (depth first, directory order). As with
GNU grep: -r follows symlinks given as FILE and skips those met in the
walk, -R follows all (a directory loop is skipped with a warning);
devices, FIFOs and sockets met in the walk are skipped (-D read reads
them, -D skip skips them as FILE too); --include/--exclude GLOB
(repeatable: the last one matching a file's base name decides; if none
matches, the file is skipped when the first one given is --include)
and --exclude-dir GLOB filter the walk and FILE names; a directory or
file that cannot be read is reported and makes the exit status 2. -d
read (the default without -r) reports a directory FILE as an error, -d
skip skips it, -d recurse is -r. Without FILE, -r searches '.', naming
files without './'; 'd//' is named 'd/' (files 'd/x').
FILE '-' (or no FILE without -r) reads standard input as a stream.

With --json, each selected line (each match with -o) is a JSON object on
its own line: {\"path\", \"line\", \"offset\", \"text\"} (text as lossy UTF-8);
with -c, one {\"path\", \"count\"} per file; with -l/-L, one {\"path\"}.

Exit status: 0 if a line was selected, 1 if none, 2 on any error (an
invalid regex, or a file that cannot be read; other files are still
searched; with -q a selected line wins).

Examples:
  mmapkit grep -c 'ERR[0-9]+' app.log        count matching lines, all cores
  mmapkit grep -n -i 'timeout' a.log b.log   a.log:12:... b.log:7:...
  mmapkit grep -o -b '[0-9]{4}-[0-9]{2}' f   each match with its byte offset
  mmapkit grep -v -c '^#' config.txt         lines that are not comments
  mmapkit grep -F -m 10 'a.b[1]' data.txt    a literal, first 10 lines
  mmapkit grep -rlw 'TODO' src               files with the word TODO
  mmapkit grep -C 2 --color=auto panic log   two lines around each match
  mmapkit grep -2 -n -f words.txt notes.txt  patterns from a file, -NUM context
  mmapkit grep -G 'a\\(b\\|c\\)\\{2\\}' f         a basic regex, as GNU grep's default
  mmapkit grep -oP 'id=\\K\\d+(?=;)' f         PCRE2: \\K and a lookahead
  mmapkit grep -c '' /usr/bin/sed            NUL-ended lines of a binary file
  find . -print0 | mmapkit grep -z '[.]rs$'  NUL-separated records
  mmapkit grep -lZ TODO a b | xargs -0 ls    NUL after each file name
  tail -f log | mmapkit grep --line-buffered --label=log -H ERR -
  zcat big.gz | mmapkit grep 'needle' -      a stream, sequentially
  mmapkit grep --json -e foo -e bar f | jq .line";
