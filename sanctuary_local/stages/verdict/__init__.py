"""Stage 3, the verdict: a line of small steps, one module per step or mode.

- ``line``: the stage's entry (``run_verdict``) and the steps each mode runs (``line(cfg)``);
- ``draft``: ``Draft``, the record the steps pass along, and ``Context``, what every step reads;
- ``prompt``: every mode's first step (flagged snippets withheld or redacted) and the paper
  mode's prompt, fitted to the model's context;
- ``prompt_hash``: the hash of the templates a verdict config uses (recorded in every prediction);
- ``paper``: the paper's mode: generate, label re-ask, parts re-ask, the label read from the text;
- ``parsing``: the label and justification from a ``Reasoning … Label:`` text, never raising;
- ``cited``: the citation mode's check and re-ask;
- ``trained``: the trained mode: classify with a model from ``verdict_model/``, justify;
- ``record``: the last step, every draft a ``Prediction``.
"""
