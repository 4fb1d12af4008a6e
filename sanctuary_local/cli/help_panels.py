"""The panels that group every command's options in ``--help`` (typer's ``rich_help_panel``).

Every command uses these five names, in this order of appearance, so a reader finds an option
under the same heading everywhere: what goes in, what comes out, which models and settings,
how fast and where, and the rest."""

from __future__ import annotations

from sanctuary_local.config.settings import PROFILE_NAMES

INPUTS = "Inputs"
OUTPUTS = "Outputs"
MODELS = "Models and profile"
PERF = "Performance"
ADVANCED = "Advanced"

#: The five names in the order a command's ``--help`` shows them.
PANELS = (INPUTS, OUTPUTS, MODELS, PERF, ADVANCED)

#: ``--profile``'s help, the same on every command that takes one.
PROFILE_HELP = " | ".join(PROFILE_NAMES) + " | a TOML/YAML profile file."
