"""HTML templates of ``sanctuary-local report`` (package data, string.Template syntax)."""
