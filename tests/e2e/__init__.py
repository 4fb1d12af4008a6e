"""e2e tests (see tests/README.md)."""
