"""Prompt templates as package data, and the tiny renderer that fills them.

Templates use ``{{name}}`` placeholders (not ``str.format``) because the prompts
contain literal JSON braces. Rendering fails loudly on a missing or unknown field so a
typo in a template can never silently reach the model.
"""

from __future__ import annotations

import hashlib
import json
import re
from functools import lru_cache
from importlib import resources
from typing import Any

from sanctuary_local.errors import UserError

_PLACEHOLDER = re.compile(r"\{\{([a-z_][a-z0-9_]*)\}\}")


@lru_cache(maxsize=32)
def load_prompt(name: str) -> str:
    """Text of the package-data file ``sanctuary_local/prompts/<name>``."""
    try:
        return resources.files("sanctuary_local.prompts").joinpath(name).read_text("utf-8")
    except FileNotFoundError:
        valid = sorted(p.name for p in resources.files("sanctuary_local.prompts").iterdir() if p.name[0] != "_")
        raise UserError(f"prompt file '{name}' not found in sanctuary_local/prompts (available: {', '.join(valid)})") from None


def load_schema(name: str) -> dict[str, Any]:
    """A JSON schema shipped next to the prompts."""
    return json.loads(load_prompt(name))


def prompt_hash(*names: str) -> str:
    """Short SHA-256 over the named prompt files (recorded in every prediction)."""
    h = hashlib.sha256()
    for name in names:
        h.update(name.encode("utf-8") + b"\0" + load_prompt(name).encode("utf-8") + b"\0")
    return h.hexdigest()[:16]


def fixed_head(template: str) -> str:
    """The template's text before its first placeholder: what every rendering shares."""
    m = _PLACEHOLDER.search(template)
    return template[: m.start()] if m else template


def render(template: str, **fields: str) -> str:
    """Replace every ``{{name}}`` with ``fields[name]``; every field must be used once at least."""
    used: set[str] = set()

    def sub(m: re.Match[str]) -> str:
        key = m.group(1)
        if key not in fields:
            raise KeyError(f"prompt placeholder '{{{{{key}}}}}' has no value (given: {', '.join(sorted(fields))})")
        used.add(key)
        return fields[key]

    out = _PLACEHOLDER.sub(sub, template)
    unused = set(fields) - used
    if unused:
        raise KeyError(f"prompt fields not in template: {', '.join(sorted(unused))}")
    return out
