"""``sanctuary-local calibrate RUN_DIR``: fit stage 3's label calibration on a scored run."""

from __future__ import annotations

from pathlib import Path

import typer

from sanctuary_local.cli.help_panels import ADVANCED, INPUTS, MODELS, OUTPUTS


def calibrate(
    run_dir: Path = typer.Argument(..., help="The --out directory of a finished `run` made with verdict.mode = scored "
                                   "or stance."),
    claims: Path = typer.Option(..., "--claims", help="The claims file of that run, with gold labels (AVeriTeC format).", rich_help_panel=INPUTS),
    out: Path = typer.Option(..., "--out", help="Where the calibration JSON goes (refused if it is RUN_DIR's own files).", rich_help_panel=OUTPUTS),
    model: str = typer.Option("logistic", "--model", help="logistic: multinomial logistic regression on the label "
                              "scores (or stances) and stage 1's label (default); scaling: per-label bias, "
                              "temperature, prior weight (scored runs only).", rich_help_panel=MODELS),
    c: float = typer.Option(1.0, "--C", min=1e-6, help="logistic: inverse L2 strength (scikit-learn's C).", rich_help_panel=ADVANCED),
    balanced: bool = typer.Option(False, "--balanced", help="logistic: weigh each label by the inverse of its "
                                  "frequency (rarer labels predicted more often: macro-F1 over accuracy).", rich_help_panel=ADVANCED),
    prior: bool = typer.Option(True, "--prior/--no-prior", help="scaling: fit a weight for stage 1's provisional label.", rich_help_panel=ADVANCED),
    temperature: bool = typer.Option(True, "--temperature/--no-temperature", help="scaling: fit a temperature (else 1).", rich_help_panel=ADVANCED),
    l2: float = typer.Option(0.1, "--l2", min=0.0, help="scaling: L2 penalty on the biases and the prior weight.", rich_help_panel=ADVANCED),
    models_dir: str = typer.Option("models", "--models-dir", help="Where fetched models live (for the model's SHA-256).", rich_help_panel=MODELS),
) -> None:
    """Fit the verdict's label calibration on a scored run, against the gold labels of its claims.

    By default a multinomial logistic regression on the four label scores (or, for a stance-mode run, the passages' stance features) and stage 1's label; --model scaling: a per-label bias, a temperature and a stage-1 prior weight.

    The file is keyed by the verdict model's SHA-256 and the stage-3 prompt hash. Use it with `--set verdict.calibration=FILE` (or a profile's verdict.calibration); it is refused for any other model or prompt.

    Fit on claims you neither tune on nor report (AVeriTeC dev: 100-149)."""
    from rich.console import Console
    from rich.markup import escape

    from sanctuary_local.calibrate import accuracy_and_f1, fit_from_run
    from sanctuary_local.errors import UserError
    from sanctuary_local.records import LABELS
    from sanctuary_local.stages.calibration import save_calibration

    if out.resolve().parent == run_dir.resolve():
        raise UserError(f"--out {out}: write the calibration outside the run directory {run_dir}")
    if model not in ("logistic", "scaling"):
        raise UserError(f"--model must be logistic or scaling, got {model!r}")
    cal, data = fit_from_run(run_dir, claims, models_dir, model=model, prior=prior, temperature=temperature, l2=l2, c=c,
                             balanced=balanced)
    try:
        save_calibration(cal, out)
    except OSError as exc:
        raise UserError(f"--out {out}: cannot write the calibration ({exc.strerror or exc})") from None
    console = Console()
    raw, fitted = accuracy_and_f1(data.examples, None), accuracy_and_f1(data.examples, cal)
    skipped = ", ".join(f"{n} {why}" for why, n in data.skipped.items())
    console.print(f"fitted on {len(data.examples)} claims ({cal.fit['claim_indices']})"
                  + (f"; left out: {skipped}" if skipped else ""), highlight=False, soft_wrap=True)
    bias = ", ".join(f"{lab} {b:+.3f}" for lab, b in zip(LABELS, cal.bias, strict=True))
    shown = (f"logistic (C={c:g}{', balanced' if balanced else ''}; inputs {' + '.join(cal.inputs)}); bias {bias}"
             if cal.kind == "logistic" else
             f"temperature {cal.temperature:.3f}; bias {bias}; stage-1 prior weight {cal.prior_weight:.3f}")
    console.print(shown, highlight=False, soft_wrap=True)
    for name, r in (("raw", raw), ("calibrated", fitted)):
        console.print(f"  on the fit claims, {name}: accuracy {r['accuracy']:.3f}, macro-F1 {r['macro_f1']:.3f}, "
                      f"predicted {r['predicted']}", highlight=False, soft_wrap=True)
    console.print(f"calibration: {escape(str(out))}  (use: --set verdict.calibration={escape(str(out))})",
                  highlight=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    """Add the ``calibrate`` command to the CLI."""
    app.command("calibrate")(calibrate)
