"""Runs CPython's own test/test_mmap.py with ``mmap`` replaced by mmapkit.

Usage: python run_cpython_test_mmap.py [stdlib|mmapkit]
Prints one line per test: "<id> <outcome>" (ok, skip, fail, error) and
exits non-zero if anything failed. The pytest wrapper runs it for both
implementations and requires identical outcomes.
"""

import os
import sys
import tempfile
import unittest


def main() -> int:
    which = sys.argv[1] if len(sys.argv) > 1 else "mmapkit"
    if which == "mmapkit":
        import mmapkit.compat

        sys.modules["mmap"] = mmapkit.compat
    # test.support writes TESTFN into the current directory.
    os.chdir(tempfile.mkdtemp(prefix="test_mmap_"))
    from test import test_mmap

    assert (test_mmap.mmap.mmap.__module__ == "mmapkit") == (which == "mmapkit")
    suite = unittest.defaultTestLoader.loadTestsFromModule(test_mmap)
    outcomes: dict[str, str] = {}

    class Recorder(unittest.TextTestResult):
        def addSuccess(self, test):  # noqa: N802
            super().addSuccess(test)
            outcomes[test.id()] = "ok"

        def addSkip(self, test, reason):  # noqa: N802
            super().addSkip(test, reason)
            outcomes[test.id()] = "skip"

        def addFailure(self, test, err):  # noqa: N802
            super().addFailure(test, err)
            outcomes[test.id()] = "fail"

        def addError(self, test, err):  # noqa: N802
            super().addError(test, err)
            outcomes[test.id()] = "error"

    runner = unittest.TextTestRunner(stream=sys.stderr, verbosity=1, resultclass=Recorder)
    result = runner.run(suite)
    for test_id in sorted(outcomes):
        print(test_id, outcomes[test_id])
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
