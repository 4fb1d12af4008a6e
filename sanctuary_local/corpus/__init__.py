"""A local corpus (issue 28): a folder of saved pages, PDFs, notes and AVeriTeC store
files, indexed once (``sanctuary-local index``) and searched for every claim in place of
the per-claim knowledge store.

- ``walk.py``     the files of a folder (links inside it only) and the members of its zip archives
- ``limits.py``   the caps of a run (file, archive, .docx XML, PDF pages) and the link policy
- ``names.py``    file names made safe to store (undecodable bytes) and to print (control characters)
- ``extract.py``  bytes → ``SourceUnit`` texts (HTML, PDF pages, text, Markdown, .docx, store lines)
- ``pdf.py``      a PDF's page tree walked once per node (no repeated pages), capped
- ``outdir.py``   the index folder: only one ``index`` made, one run at a time (lock), fsync
- ``build.py``    units → an index generation on disk (texts, segments, BM25 postings), atomic
- ``index.py``    a built index, memory-mapped: BM25 search, unit texts, provenance
- ``source.py``   the evidence source stage 2 reads: a knowledge store or a corpus index

A bare ``import sanctuary_local.corpus`` stays light: the extractors import trafilatura,
pypdf and python-docx only when a file of their type is read.
"""
