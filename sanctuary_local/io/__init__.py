"""AVeriTeC input/output: claims files, the knowledge store (directory or zip),
predictions JSON and the FEVER-8 leaderboard CSV. Only base dependencies (orjson)."""

from sanctuary_local.io.claims import claim_to_official, read_claims
from sanctuary_local.io.leaderboard import LeaderboardRow, read_leaderboard_csv, write_leaderboard_csv
from sanctuary_local.io.predictions import (
    gold_to_solution,
    leaderboard_to_predictions,
    prediction_to_official,
    predictions_to_leaderboard,
    read_predictions_json,
    write_predictions_json,
)
from sanctuary_local.io.store import KnowledgeStore, StoreLoad, StoreProblem

__all__ = [
    "KnowledgeStore",
    "LeaderboardRow",
    "StoreLoad",
    "StoreProblem",
    "claim_to_official",
    "gold_to_solution",
    "leaderboard_to_predictions",
    "prediction_to_official",
    "predictions_to_leaderboard",
    "read_claims",
    "read_leaderboard_csv",
    "read_predictions_json",
    "write_leaderboard_csv",
    "write_predictions_json",
]
