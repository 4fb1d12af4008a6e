"""This machine: what a profile needs and whether it is there (``doctor``), and how fast the
pipeline runs on it, stage by stage (``bench``). Used by the ``doctor`` and ``bench`` commands."""
