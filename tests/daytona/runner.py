"""The Daytona acceptance scripts' runner: runs a script's `test_*` functions in order (or those
named on the command line), prints `ok`/`FAIL` per test, always runs the script's cleanup, and
exits 1 if any failed."""

import sys
import traceback


def run(namespace, cleanup):
    tests = [v for k, v in namespace.items() if k.startswith("test_") and callable(v)]
    only = sys.argv[1:]
    failed = []
    try:
        for test in tests:
            if only and test.__name__ not in only:
                continue
            try:
                test()
                print(f"ok   {test.__name__}", flush=True)
            except Exception:
                failed.append(test.__name__)
                print(f"FAIL {test.__name__}", flush=True)
                traceback.print_exc()
    finally:
        cleanup()
    if failed:
        print(f"{len(failed)} failed: {failed}")
        sys.exit(1)
    print("all passed")
