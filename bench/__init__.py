"""mmapkit benchmarks: `python -m bench SUITE [--quick]`, `python -m bench all`, `--list`.

Each suite generates its own seeded data in bench/data/ (git-ignored) and writes
bench/results/SUITE.{md,json,png}. See bench/harness.py for the machinery and
bench/suites/ for the suites.
"""
