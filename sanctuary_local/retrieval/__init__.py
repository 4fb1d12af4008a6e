"""Stage 2 building blocks (SANCTUARY §4.2–4.4): ``segment`` (500-token segments with
exact offsets, BM25 terms), ``bm25`` (engines + index cache), ``chunking`` (chonkie
semantic chunks with exact offsets), ``embed`` (sentence-transformers embedders),
``dense`` (FAISS search, dedup, threshold). The stage glue is ``stages/evidence.py``.
Heavy libraries are imported inside functions/constructors: importing this is light."""
