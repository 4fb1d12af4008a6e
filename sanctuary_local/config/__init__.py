"""The run's configuration: one typed tree, one section per stage, and named profiles.

- ``settings``: the ``Config`` tree, its stage sections, profiles (``profiles/*.toml`` or a
  user's TOML/YAML file) and ``load_config``, which validates eagerly and names a bad key;
- ``llm``: the LLM sections every model-backed stage holds (``LLMConfig``, ``SamplingConfig``).
"""
