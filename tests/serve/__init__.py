"""serve tests (see tests/README.md)."""
