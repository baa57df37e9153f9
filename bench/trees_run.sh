#!/bin/sh
# The `trees` part of the `files` benchmark alone, at full size (issue 25):
# `grep -r` -l/-c/-n with a common literal, a rare literal and a regex over
# /usr/include and the Python standard library, -l over a tree of tiny files, and
# the live-pipe latency row (issue 40); GNU grep, rg -uuu, mmapkit and mmapkit -j 1; warm and
# cold page cache (cold drops the whole cache when root). Needs the release CLI
# (target/release/mmapkit, or $MMAPKIT_BIN) and ripgrep in .venv/tools/bin or on
# PATH; runs offline. Writes files.{md,json,png} and a log into "$OUT".
#   OUT=/tmp/trees bench/trees_run.sh
set -eu
cd "$(dirname "$0")/.."
: "${OUT:?set OUT to the directory for the results}"
mkdir -p "$OUT"
PY=.venv/bin/python
[ -x "$PY" ] || PY=python3
TASKS=$("$PY" -c 'from bench.suites.files import trees; print(",".join(c[0] for c in trees.CASES))'),stream_latency
"$PY" -m bench files --sizes small --tasks "$TASKS" --cache both \
    --contenders grep,rg,mmapkit,"mmapkit -t1" --results-dir "$OUT" 2>&1 | tee "$OUT/trees.log"
