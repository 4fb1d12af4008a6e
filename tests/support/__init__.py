"""Test support: stand-ins and generators that tests (and some benchmarks) share."""
