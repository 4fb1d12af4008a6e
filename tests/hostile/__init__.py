"""hostile tests (see tests/README.md)."""
