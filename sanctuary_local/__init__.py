"""sanctuary_local: the SANCTUARY fact-checking pipeline on local open models.

Importing the package is light: heavy libraries (torch, vllm, faiss, llama_cpp) are
imported lazily inside the modules that need them.
"""

__version__ = "0.1.0"
