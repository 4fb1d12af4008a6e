"""``sanctuary-local serve --corpus INDEX``: a local web page and JSON API for checking
claims against your own indexed documents (``sanctuary_local/serve``, docs/serve.md)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import typer

from sanctuary_local.cli.help_panels import PROFILE_HELP

INPUTS, OUTPUTS, MODELS, PERFORMANCE, ADVANCED = "Inputs", "Outputs", "Models and profile", "Performance", "Advanced"


def serve(
    ctx: typer.Context,
    corpus: Path = typer.Option(..., "--corpus", help="A corpus index written by `sanctuary-local index`.",
                                rich_help_panel=INPUTS),
    data: Path = typer.Option(Path("sanctuary-serve"), "--data",
                              help="Where checks are kept: history, runs, the queue across restarts (not inside "
                                   "the --corpus index).",
                              rich_help_panel=OUTPUTS),
    profile: str = typer.Option("cpu", "--profile", help=PROFILE_HELP,
                                rich_help_panel=MODELS),
    models_dir: str = typer.Option(None, "--models-dir", help="Where fetched models live (default: models/).",
                                   rich_help_panel=MODELS),
    set_: list[str] = typer.Option([], "--set", help="Override a config value (repeatable), as in `run`.",
                                   rich_help_panel=MODELS),
    max_queue: int = typer.Option(100, "--max-queue", help="Checks that may wait; one more is refused (HTTP 429).",
                                  rich_help_panel=PERFORMANCE),
    host: str = typer.Option("127.0.0.1", "--host",
                             help="Address to listen on; one that is not loopback needs --token.",
                             rich_help_panel=ADVANCED),
    port: int = typer.Option(8000, "--port", help="Port to listen on, 0..65535 (0: any free port).",
                             rich_help_panel=ADVANCED),
    token: str = typer.Option(None, "--token", envvar="SANCTUARY_SERVE_TOKEN",
                              help="Require this token: API bearer token, page login (at least 16 printable ASCII "
                                   "characters). Prefer the environment variable: other local users see a "
                                   "command line (ps).",
                              rich_help_panel=ADVANCED),
    max_body_kb: int = typer.Option(64, "--max-body-kb", help="Largest request body accepted, at least 1 (HTTP 413 "
                                    "above).", rich_help_panel=ADVANCED),
    session_hours: float = typer.Option(12.0, "--session-hours", help="How long a page login lasts (with --token); "
                                        "logging out or changing the token ends it sooner.", rich_help_panel=ADVANCED),
    header_timeout: float = typer.Option(10.0, "--header-timeout", help="Seconds a client has to send a request's "
                                         "headers, then its body; then HTTP 408 and the connection is closed.",
                                         rich_help_panel=ADVANCED),
    max_connections: int = typer.Option(512, "--max-connections", help="Connections open at once (uvicorn's "
                                        "limit_concurrency); one more gets HTTP 503 and is closed.",
                                        rich_help_panel=ADVANCED),
) -> None:
    """Serve a local web page and JSON API for checking claims against your own documents.

    The page (no script, no outside assets) takes a claim and an optional date, shows the queue and each check's progress by stage, then the verdict with its label probabilities, the questions, each evidence snippet highlighted in its source (file, PDF page, character span) and the justification; every check is kept under --data, and a restart resumes unfinished ones. The API: POST /api/checks, GET /api/checks/ID, GET /api/checks (a page at a time: limit, before), DELETE /api/checks/ID (docs/serve.md). The models load once and serve every check. With --token, a page login lasts --session-hours, and wrong tokens are slowed down, then refused (HTTP 429), per client address.

    Ctrl-C or SIGTERM stops it within 5 s: one line says what became of the checks (the one running and the waiting ones stay queued and resume at the next start), every process it started ends, and it exits 130 (Ctrl-C) or 143 (SIGTERM); while it starts, before it prints its address, either one prints `aborted` and leaves --data as it was. Exit code 2: bad settings."""
    from sanctuary_local.cli.run_cmd import parse_overrides
    from sanctuary_local.serve.app import ServeSettings, run_server

    source = ctx.get_parameter_source("token")  # COMMANDLINE or ENVIRONMENT (SANCTUARY_SERVE_TOKEN)
    settings = ServeSettings(corpus=corpus, data=data, profile=profile, host=host, port=port, token=token or None,
                             token_in_argv=getattr(source, "name", "") == "COMMANDLINE",
                             max_queued=max_queue, max_body=max_body_kb * 1024, overrides=parse_overrides(set_) or None,
                             models_dir=models_dir, session_hours=session_hours, header_timeout_s=header_timeout,
                             max_connections=max_connections)
    code = run_server(settings)
    # Everything is saved and closed: skip the interpreter's teardown of torch and llama.cpp,
    # which takes seconds and would break the promise of a stop within 5 s of SIGTERM.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)
