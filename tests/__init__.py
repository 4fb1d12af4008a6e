"""The test suite, grouped by kind: see tests/README.md."""
