"""``sanctuary-local report``: a cited report for people, one self-contained HTML page per
claim plus an index.

Each claim page shows the claim, the verdict, the justification and every evidence
snippet the verdict prompt saw, numbered as the prompt numbered them ("Evidence 2.1" =
question 2, its first snippet kept in the prompt), so the justification's mentions of
"Evidence q.n" become links to the snippet. Each snippet is shown highlighted (``<mark>``)
inside its source page's text, at its exact character span: the text between the marks
is ``document.text[start:end]``. Pages carry their CSS inline and load nothing: they
open offline. Everything from the claims, the store, the run's files and the model is
HTML-escaped (issue 27).

- ``pages``: the HTML of a claim's page and of the index;
- ``build``: what a run directory holds, read defensively, and the pages written (``write_report``).
"""
