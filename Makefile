# Two commands on a fresh machine: `make run` (set up + quick side-by-side benchmarks)
# and `make test` (every test). Both create .venv and install what they need.
PYTHON ?= python3
VENV   := .venv
VPY    := $(VENV)/bin/python
export VIRTUAL_ENV := $(abspath $(VENV))
export PATH := $(abspath $(VENV))/tools/bin:$(abspath $(VENV))/bin:$(HOME)/.cargo/bin:$(PATH)

TSAN_TARGET ?= x86_64-unknown-linux-gnu
# make's builds start mostly from scratch (a fresh clone, CI): incremental caches
# there are gigabytes of disk that no later build reads. Plain `cargo` keeps them.
export CARGO_INCREMENTAL ?= 0

.PHONY: docs chromium fuzz tsan grep-diff run test bench bench-tools bench-peers bench-rocksdb bench-etcd setup develop cli dist rust-test jepsen lint py-test stubtest clean

# Every suite, every peer and the baseline at small sizes, warm cache: ~5 minutes on 2
# cores after set-up; reports in bench/results/quick/ (git-ignored), one-screen summary
# at the end. `make bench`: the full sizes, into bench/results/ and the README.
run: develop cli bench-tools bench-peers bench-rocksdb bench-etcd
	$(VPY) -m bench all --quick

bench: develop cli bench-tools bench-peers bench-rocksdb bench-etcd
	$(VPY) -m bench all

test: develop rust-test jepsen lint docs py-test stubtest

# --- set-up ---------------------------------------------------------------
$(VPY):
	$(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install --quiet --upgrade pip

$(VENV)/.deps: $(VPY) pyproject.toml
	$(VPY) -m pip install --quiet "maturin>=1.9,<2" "numpy>=1.26" "pytest>=8" "hypothesis>=6.100" "mypy>=1.10" "ruff>=0.17,<0.18" "matplotlib>=3.8"
	touch $@

setup: $(VENV)/.deps

# Builds the extension in release mode and installs the package editable into .venv
# (the .so lands in python/mmapkit/, ignored by git), with the core's test hooks
# (the FeatureStore power-loss matrix sets MMAPKIT_TEST_BOOT_ID); wheels have none.
# Then links .venv/bin/mmapkit to cargo's CLI (where `pip install .` puts the wheel's
# copy), so the README's `mmapkit ...` lines and `python -m mmapkit` run the current build.
CARGO_TARGET := $(abspath $(or $(CARGO_TARGET_DIR),target))
develop: setup cli
	$(VENV)/bin/maturin develop --release --quiet --features test-hooks --extras test,bench,torch,dask,docs
	ln -sfn $(CARGO_TARGET)/release/mmapkit $(VENV)/bin/mmapkit

cli:
	cargo build --release -p mmapkit-cli --quiet

# The sdist and the abi3 wheel (target/dist/: maturin builds into the cargo target
# dir's wheels/ and copies the wheel out, so the two must differ), built as `pip
# install .` builds them: through the project's PEP 517 backend (build_backend/mmapkit_build.py: maturin's, plus
# the `mmapkit` CLI as a wheel script, which pip puts on PATH, as ruff and uv ship theirs;
# the sdist carries the CLI crate), in a venv holding only what building needs (maturin
# and PyPA's `build`), not the development one. The cargo target dir is the checkout's,
# so only what changed is rebuilt. Then checks that the crates package (mmapkit-cli's
# dependency on mmapkit resolved against the packaged mmapkit, not crates.io).
DIST_VENV := target/dist-venv
$(DIST_VENV)/.deps: pyproject.toml
	$(PYTHON) -m venv $(DIST_VENV)
	$(DIST_VENV)/bin/python -m pip install --quiet --disable-pip-version-check "maturin>=1.9,<2" "build>=1.2"
	touch $@

dist: $(DIST_VENV)/.deps
	rm -f target/dist/mmapkit-*.whl target/dist/mmapkit-*.tar.gz
	PATH="$(abspath $(DIST_VENV))/bin:$$PATH" VIRTUAL_ENV="$(abspath $(DIST_VENV))" \
		$(DIST_VENV)/bin/python -m build --no-isolation --sdist --wheel --outdir target/dist .
	cargo package --quiet -p mmapkit -p mmapkit-replicate -p mmapkit-cli --no-verify --allow-dirty

# The command-line peers of the `files` benchmark (ripgrep, sd), built from crates.io
# into .venv/tools (first on PATH above); only when missing.
TOOLS := $(VENV)/tools
bench-tools:
	@if [ ! -x $(TOOLS)/bin/rg ] || [ ! -x $(TOOLS)/bin/sd ]; then \
		echo "installing ripgrep and sd into $(TOOLS) (cargo install, a few minutes)"; \
		cargo install --locked --quiet --root $(abspath $(TOOLS)) ripgrep@^15 sd@^1; \
	fi

# The drivers of the `log` benchmark (bench/peers/): Rust (the baseline, mmapkit's
# Rust API, raft-engine and commitlog from crates.io) into bench/peers/rust/target,
# Go (tidwall/wal, etcd's wal from the Go module proxy) into bench/peers/go/bin; both
# git-ignored. cargo and go rebuild only what is missing or outdated. The baseline and
# mmapkit drivers must build; a peer that does not is reported and shown as n/a. No
# --locked for cargo: the lock file also pins mmapkit's own dependencies (a path
# dependency), which change with the core; the peers' versions stay as locked.
PEERS_RS := bench/peers/rust
PEERS_GO := bench/peers/go
bench-peers:
	cargo build --release --quiet --manifest-path $(PEERS_RS)/Cargo.toml \
		--bin log-baseline --bin log-mmapkit --bin log-null
	@cargo build --release --quiet --manifest-path $(PEERS_RS)/Cargo.toml \
		--bin log-raft-engine --bin log-commitlog \
		|| echo "warning: the raft-engine/commitlog drivers did not build; the log suite shows them as n/a"
	cargo build --release --quiet -p mmapkit-raft --bin mmapkit-kv
	cargo build --release --quiet -p mmapkit-replicate --example catchup
	@if command -v go >/dev/null; then \
		cd $(PEERS_GO) && go build -mod=readonly -buildvcs=false -o bin/ ./cmd/... \
		|| echo "warning: the Go drivers did not build; the log and replication suites show them as n/a"; \
	else echo "warning: no go toolchain: the log suite shows tidwall/wal and etcd/wal, the replication suite etcd, as n/a"; fi

# The replication suite's RocksDB peer: mmapkit-kv with the RocksDB log store (the
# rocksdb crate linked against Debian's librocksdb; bindgen needs libclang), in its own
# target dir; installed from Debian's packages when missing and we are root.
bench-rocksdb:
	@if [ ! -e /usr/lib/x86_64-linux-gnu/librocksdb.so ] || ! ls /usr/lib/llvm-*/lib/libclang.so* >/dev/null 2>&1; then \
		if [ "$$(id -u)" = 0 ]; then apt-get install -y -qq librocksdb-dev libclang-dev >/dev/null \
			|| echo "warning: could not install librocksdb-dev/libclang-dev"; fi; fi
	@ROCKSDB_LIB_DIR=/usr/lib/x86_64-linux-gnu CARGO_TARGET_DIR=$(abspath target/bench-raft) \
		cargo build --release --quiet -p mmapkit-raft --features rocksdb --bin mmapkit-kv \
		|| echo "warning: the RocksDB store did not build; the replication suite shows it as n/a"

# The replication suite's etcd peer: Debian's etcd-server (3.4.23 on bookworm) and
# etcdctl, installed when missing and we are root (its Go load generator, kv-etcd, is
# built by bench-peers); without it the suite shows etcd as n/a.
bench-etcd:
	@if [ ! -x /usr/bin/etcd ]; then \
		if [ "$$(id -u)" = 0 ]; then apt-get install -y -qq etcd-server etcd-client >/dev/null \
			|| echo "warning: could not install etcd-server/etcd-client"; \
		else echo "warning: no /usr/bin/etcd (apt-get install etcd-server as root): the replication suite shows etcd as n/a"; fi; fi

# The documentation site (build/docs/html/index.html): Sphinx over docs/ (MyST pages,
# autodoc of the installed package, the built CLI's --help), with the crates' rustdoc
# copied in under rust/. Both fail on any warning: a missing doc comment or a broken
# intra-doc link in the crates, a broken reference or a bad docstring in the site.
# Every example in it runs in `make test` (tests/python/test_doc_examples.py), and
# tests/python/test_docs.py builds it again and checks it in headless Chromium.
DOCS_OUT := build/docs/html
docs: develop cli
	RUSTDOCFLAGS="-D warnings -D missing-docs -D rustdoc::broken-intra-doc-links" \
		cargo doc --no-deps --quiet -p mmapkit -p mmapkit-replicate -p mmapkit-raft
	$(VPY) -m sphinx -W --keep-going -n -q -b html docs $(DOCS_OUT)

# The docs test's browser: Debian's chromium, installed when missing and we are root
# (without it tests/python/test_docs.py skips its browser checks, saying why).
chromium:
	@if ! command -v chromium >/dev/null; then \
		if [ "$$(id -u)" = 0 ]; then apt-get install -y -qq chromium >/dev/null \
			|| echo "warning: could not install chromium: the docs' browser check is skipped"; \
		else echo "warning: no chromium (apt-get install chromium as root): the docs' browser check is skipped"; fi; fi

# --- checks ---------------------------------------------------------------
# Every crate but the Python extension, in one cargo invocation, so features are
# unified once and each crate is compiled once: separate `-p` builds (the CLI,
# the power-loss suite, the KV binary) each resolved other features and rebuilt
# most of the graph. It includes the power-loss suite (crates/mmapkit-crashfs,
# FUSE, root: it fails where FUSE is unavailable, saying what it needs, unless
# MMAPKIT_ALLOW_NO_FUSE=1 lets it pass unrun, printing NOT RUN), whose
# `replace` matrix runs the debug CLI that this same build makes, and the
# `mmapkit-kv` binary the Jepsen test runs.
RUST_TESTS := --workspace --exclude mmapkit-py
rust-test:
	cargo test --quiet $(RUST_TESTS)

# Jepsen-style linearizability test of mmapkit-kv (tests/jepsen, Go + Porcupine): three
# nodes behind fault-injecting proxies, concurrent clients, SIGKILL/SIGSTOP/partitions,
# disk wipes with member replacement, 3->5->3 membership changes and a leader's power
# loss (the nodes' data on crates/mmapkit-crashfs: FUSE, as root) on a seeded schedule
# (~2 minutes; longer: MMAPKIT_JEPSEN_SECONDS=600; replay a run:
# MMAPKIT_JEPSEN_SEED=N, printed at the start); then the negative control (stale reads
# from cut-off followers must be rejected). -v: the counts are printed on success too.
# MMAPKIT_KV: the binary under test (a relative path is taken from tests/jepsen).
MMAPKIT_KV ?= ../../target/debug/mmapkit-kv
jepsen:
	cargo test --quiet $(RUST_TESTS) --no-run
	cargo build --quiet -p mmapkit-crashfs --bin crashfs-mount
	cd tests/jepsen && MMAPKIT_KV="$(MMAPKIT_KV)" go test -count=1 -timeout 20m -v ./...

# Not part of `make test`: the map module's tests (the concurrent
# SharedMap/AppendMap one included) under ThreadSanitizer. Needs nightly
# with rust-src (`rustup component add rust-src --toolchain nightly`);
# rebuilds std instrumented (~5 minutes the first time on 2 cores).
tsan:
	RUSTFLAGS="-Zsanitizer=thread" TSAN_OPTIONS="halt_on_error=1" \
		cargo +nightly test -Zbuild-std --target $(TSAN_TARGET) -p mmapkit --lib map::

# Not part of `make test`: every fuzz target (crates/mmapkit-fuzz holds the
# harnesses, fuzz/ the cargo-fuzz targets) for FUZZ_SECONDS each, one after
# another, starting from the committed corpus fuzz/corpus/TARGET; what they
# add goes to fuzz/corpus-run/ and crashes to fuzz/artifacts/ (both
# git-ignored). Needs nightly and cargo-fuzz (`cargo install cargo-fuzz
# --locked`). `cargo test` replays fuzz/corpus on stable.
FUZZ_SECONDS ?= 60
FUZZ_TARGETS := log_recovery npy_header replicate raft_decode kv_snapshot kv_backup fasta grep
fuzz:
	@command -v cargo-fuzz >/dev/null || cargo install --locked --quiet cargo-fuzz
	cd fuzz && cargo +nightly fuzz build -O --debug-assertions
	cd fuzz && for t in $(FUZZ_TARGETS); do \
		mkdir -p corpus-run/$$t artifacts/$$t && \
		./target/x86_64-unknown-linux-gnu/release/$$t corpus-run/$$t corpus/$$t \
			-max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 -timeout=20 \
			-rss_limit_mb=2048 -max_len=4096 -artifact_prefix=artifacts/$$t/ \
			|| exit 1; \
	done

# Not part of `make test` (which runs its first 3000 cases, through cargo test): the
# random differential test of `mmapkit grep` against GNU grep 3.8 at full size
# (crates/mmapkit-cli/tests/grep_differential.rs: seeded option sets, operands and
# patterns over real trees and crafted files; 30000 cases, about 4 minutes on 2 cores).
# It prints the counts by cause; every difference goes to target/grep-diff.txt, each
# with the command line and the variables that replay it (MMAPKIT_GREP_DIFF_ONLY=N).
GREP_DIFF_CASES ?= 30000
GREP_DIFF_SEED ?= 40
grep-diff:
	MMAPKIT_GREP_DIFF_CASES=$(GREP_DIFF_CASES) MMAPKIT_GREP_DIFF_SEED=$(GREP_DIFF_SEED) \
		MMAPKIT_GREP_DIFF_REPORT=$(CARGO_TARGET)/grep-diff.txt \
		cargo test --quiet -p mmapkit-cli --test grep_differential -- --nocapture

lint:
	cargo clippy --workspace --all-targets --quiet -- -D warnings
	cargo fmt --all --check
	$(VPY) -m ruff check --quiet
	$(VPY) -m ruff format --check --quiet
	$(VPY) -m mypy

py-test: cli bench-peers dist chromium
	$(VPY) -m pytest -q --durations=15 tests/python

stubtest:
	$(VPY) -m mypy.stubtest mmapkit._native --allowlist tests/python/stubtest-allowlist.txt

clean:
	cargo clean
	rm -rf $(VENV) python/mmapkit/*.so
