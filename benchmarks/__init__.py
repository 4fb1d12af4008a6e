"""The benchmark scripts, by topic (see README.md). A package so that scripts import each
other as ``benchmarks.TOPIC.NAME`` and ``benchmarks.common``, never by a bare name."""
