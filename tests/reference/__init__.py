"""reference tests (see tests/README.md)."""
