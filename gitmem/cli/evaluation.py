"""``gitmem eval``: how well search finds this vault's memories, measured with questions
built from the vault's own content and history (see :mod:`gitmem.upkeep.evaluation`).

Registered in :mod:`gitmem.cli.main`.  Only click is imported at module level so
``gitmem --help`` stays fast.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from .common import emit, json_option, open_vault

if TYPE_CHECKING:  # pragma: no cover
    from ..upkeep.evaluation import EvalReport

__all__ = ["eval_command"]

def _names(_ctx: click.Context, _param: click.Parameter, value: str | None) -> list[str] | None:
    """A comma-separated list of names (None when not given); the Vault checks them."""
    return None if value is None else [v.strip() for v in value.split(",") if v.strip()]


@click.command("eval")
@click.option("--questions", "-n", default=200, show_default=True, type=click.IntRange(1, 100_000),
              help="At most this many questions (shared out among the kinds).")
@click.option("--seed", default=0, show_default=True, type=int,
              help="Which questions are drawn: the same seed asks the same questions of the same vault.")
@click.option("--kinds", callback=_names, metavar="KIND[,KIND]",
              help="Question kinds to ask (default: all): facts, superseded, renamed, follows.")
@click.option("--modes", callback=_names, metavar="MODE[,MODE]",
              help="Search modes to measure (default: lexical, and hybrid when the embed extra "
                   "is installed and vectors exist).")
@click.option("--show", "show", default=0, type=click.IntRange(0, 100), metavar="N",
              help="Also print N of the questions asked, with the memories expected.")
@json_option
@click.pass_context
def eval_command(ctx: click.Context, questions: int, seed: int, kinds: list[str] | None,
                 modes: list[str] | None, show: int, as_json: bool) -> None:
    """Measure how well search finds this vault's memories, with no LLM.

    Questions are built from the vault's own content and history, each
    knowing which memory answers it: a memory's facts asked without its
    title's words (facts), what an older version said (superseded), a note
    asked by a former name (renamed), words of a memory and of the one it
    follows (follows). Each is asked of every search mode; the table shows
    hit@1/5/10 (the share of questions whose memory came first, in the first
    5, in the first 10) and MRR (the mean of 1/rank, 0 past rank 10), per
    mode and per kind. The vault does not change; searches made here do not
    count as retrievals. See docs/search.md (Measuring recall on your own
    vault) for how to read the figures and what they cannot tell.

    \b
    Examples:
      gitmem eval
      gitmem eval --questions 500 --seed 7 --kinds facts,follows
      gitmem eval --modes lexical --json
    """
    vault = open_vault(ctx)
    if as_json or not sys.stderr.isatty():
        report = vault.evaluate(questions=questions, seed=seed, kinds=kinds, modes=modes)
    else:
        with click.progressbar(length=1, label="asking", file=sys.stderr) as bar:
            def progress(done: int, total: int) -> None:
                bar.length = total
                bar.update(done - bar.pos)
            report = vault.evaluate(questions=questions, seed=seed, kinds=kinds, modes=modes,
                                    progress=progress)
    data = report.to_dict()
    data["asked"] = data["asked"][:show]
    emit(data, as_json, lambda: report_text(report, show))


def report_text(report: EvalReport, show: int = 0) -> str:
    """``gitmem eval`` as a table: one row per mode and kind."""
    asked = sum(report.questions.values())
    lines = [f"{asked} question(s) about {report.memories} memories (seed {report.seed}): "
             + ", ".join(f"{n} {k}" for k, n in report.questions.items())]
    if not asked:
        return lines[0] + "\nnothing to ask: the vault has no material for these kinds (see gitmem eval --help)"
    lines.append("")
    lines.append(f"{'mode':<8} {'kind':<11} {'questions':>9} {'hit@1':>6} {'hit@5':>6} {'hit@10':>6} {'MRR':>6}")
    for mode, kinds in report.modes.items():
        for kind, s in kinds.items():
            lines.append(f"{mode:<8} {kind:<11} {s.questions:>9} {s.hit1:>6.3f} {s.hit5:>6.3f} "
                         f"{s.hit10:>6.3f} {s.mrr:>6.3f}")
    for mode, why in report.skipped_modes.items():
        lines.append(f"{mode:<8} not measured: {why}")
    if show:
        lines.append("")
    for q in report.asked[:show]:
        lines.append(f"  [{q.kind}] {q.text}  -> {', '.join(e[:8] for e in q.expected)}")
    return "\n".join(lines)
