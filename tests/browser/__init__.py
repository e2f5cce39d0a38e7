"""The browser tests: a package, so the fixtures of conftest.py (package scope) end with it, before the
tests that run after it in the same process (tests/e2e/test_00_make_run.py under `make test`)."""
