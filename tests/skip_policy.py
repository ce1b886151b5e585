"""The Python tests' half of tests/skip_policy.sh: skip_or_fail(REASON) ends a test as a
ctest skip (exit 77) where an optional resource is missing (Debian's python3-torch, h5py),
and as a failure under COLONNADE_NO_SKIP=1 (.ci/run sets it: CI installs every package, so
a skip there would hide a broken install or a broken test).

    sys.path.insert(0, <the tests/ folder>); from skip_policy import skip_or_fail
"""
import os
import sys


def skip_or_fail(msg):
    if os.environ.get("COLONNADE_NO_SKIP") == "1":
        print("FAIL (COLONNADE_NO_SKIP=1, nothing may be skipped): " + msg, file=sys.stderr)
        sys.exit(1)
    print("SKIP: " + msg)
    sys.exit(77)
