"""A local corpus (issue 28): a folder of saved pages, PDFs, notes and AVeriTeC store
files, indexed once (``sanctuary-local index``) and searched for every claim in place of
the per-claim knowledge store.

- ``walk.py``     the files of a folder and of the zip archives in it, with content hashes
- ``extract.py``  bytes → ``SourceUnit`` texts (HTML, PDF pages, text, Markdown, .docx, store lines)
- ``build.py``    units → an index generation on disk (texts, segments, BM25 postings), atomic
- ``index.py``    a built index, memory-mapped: BM25 search, unit texts, provenance
- ``source.py``   the evidence source stage 2 reads: a knowledge store or a corpus index

A bare ``import sanctuary_local.corpus`` stays light: the extractors import trafilatura,
pypdf and python-docx only when a file of their type is read.
"""
