"""mmapkit benchmarks: `python -m bench SUITE [--quick]`, `python -m bench all`, `--list`.

Each suite generates its own seeded data in bench/data/ (git-ignored) and writes
bench/results/SUITE.{md,json,png}. bench/harness.py: the machinery (suite model,
runner, shared helpers); bench/contenders.py: the tools and mmapkit front ends the
suites measure; bench/report.py: tables, plots, the README section; bench/suites/:
the suites.
"""
