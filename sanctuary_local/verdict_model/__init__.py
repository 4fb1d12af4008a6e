"""The trained verdict of stage 3: models that map a claim and its evidence to label
probabilities, learned from AVeriTeC train (``verdict-model train``).

- ``inputs``: the record a model reads (claim + question–answer pairs), from gold or pipeline evidence;
- ``base``: the protocol and the training settings;
- ``tfidf``: word/bigram TF-IDF + logistic regression (the floor);
- ``encoder``: a fine-tuned cross-encoder (torch, CPU);
- ``decision``: argmax or per-label offsets fitted on held-in claims;
- ``store``: model directories, cards, hashes, atomic writes, loading by name;
- ``train``, ``evaluate``: the two commands' work.
"""
