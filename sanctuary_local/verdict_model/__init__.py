"""The trained verdict of stage 3: models that map a claim and its evidence to label
probabilities, learned from AVeriTeC train (``verdict-model train``).

- ``inputs``: the record a model reads (claim + question–answer pairs), from gold or pipeline evidence;
- ``base``: the protocol and the training settings;
- ``tfidf``: word/bigram TF-IDF + logistic regression (the floor; ``max_pairs`` 0 reads the claim alone);
- ``stance``: stance cues per question–answer pair, pooled per claim, + logistic regression;
- ``encoder``: a fine-tuned cross-encoder (torch, CPU);
- ``stack``: several models combined by a weighted geometric mean (the default);
- ``decision``: argmax or per-label offsets fitted on held-in claims;
- ``confidence``: the threshold under which a claim is shown as uncertain;
- ``external``: another system's evidence file as inputs;
- ``store``: model directories, cards, hashes, atomic writes, loading by name;
- ``train``, ``evaluate``: the two commands' work.
"""
