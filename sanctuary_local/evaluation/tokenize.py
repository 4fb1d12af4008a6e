"""``nltk.word_tokenize`` exactly as the official scorer runs it, offline and cached.

nltk's ``word_tokenize(text)`` = Punkt English sentence split, then the improved Treebank
word tokenizer (``NLTKWordTokenizer``) on each sentence. We build the same two objects from
the bundled Punkt parameters (see ``nltk_data``), so no ``punkt_tab`` download is needed.
"""

from __future__ import annotations

import functools
from typing import Any

from sanctuary_local.evaluation.nltk_data import punkt_parameters


@functools.lru_cache(maxsize=1)
def _tokenizers() -> tuple[Any, Any]:
    from nltk.tokenize.destructive import NLTKWordTokenizer
    from nltk.tokenize.punkt import PunktSentenceTokenizer

    return PunktSentenceTokenizer(punkt_parameters()), NLTKWordTokenizer()


@functools.lru_cache(maxsize=200_000)
def word_tokenize(text: str) -> tuple[str, ...]:
    """Tokens of ``text`` as ``nltk.word_tokenize(text)`` (language="english") returns them.

    Cached: the same evidence string is compared against many others."""
    sentences, words = _tokenizers()
    return tuple(token for sent in sentences.tokenize(text) for token in words.tokenize(sent))
