"""Does ``gitmem eval`` agree with real questions?  Rank search configurations both ways.

Usage (prints JSON)::

    python bench/eval_agreement.py [DATASET] [--variants plain-bm25,b0.25,...] [--questions 200]
                                   [--seed 0] [--vaults DIR] [--title speaker-words]

DATASET is a file in LoCoMo's JSON format (default ``../shared/eval/locomo_dev.json``; CC
BY-NC: read from there, never copied into this repository).  Each conversation becomes a
vault exactly as ``bench/retrieval.py --backend vault`` builds it (one memory per turn through
``Vault.add``, each following the turn before it in its session; ``--vaults DIR`` keeps them
outside the repository for the next run).  ``gitmem eval``'s question builder
(:func:`gitmem.upkeep.evaluation.build_questions`) asks up to ``--questions`` questions of each
vault, and every variant of ``bench/retrieval.py``'s ``VARIANTS`` (a ``SearchConfig``) answers
them from a search index of the vault's memories built with that configuration; the dataset's
real questions (categories 1-4) are answered by the same variants as ``bench/retrieval.py``
does.  Reported: ``gitmem eval``'s figures per search mode of the vaults themselves
(``--modes``; hybrid embeds each vault first); per variant, the eval's hit@5 and MRR and
the real questions' hit@5 and MRR; and Spearman's rank correlation between the two
rankings of the variants (ties share their mean rank), overall and per kind.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import retrieval  # noqa: E402 - bench/retrieval.py: the loader, the vault backend, the variants

from gitmem.search.whoosh import SearchConfig, SearchIndex  # noqa: E402
from gitmem.upkeep.evaluation import Question, build_questions, by_kind, ranks, searchers  # noqa: E402

DEFAULT_VARIANTS = ("plain-bm25,b0.25,+porter2,+speaker,+group,+date,+context,+agent-boost,final,"
                    "no-context,no-neighbour,k1-1.2,title2")


def rank_values(xs: list[float]) -> list[float]:
    """1-based ranks of ``xs`` (ascending), ties sharing their mean rank."""
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    out = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def spearman(a: list[float], b: list[float]) -> float:
    """Spearman's rank correlation (Pearson's of the ranks, ties averaged)."""
    ra, rb = rank_values(a), rank_values(b)
    n = len(a)
    ma, mb = sum(ra) / n, sum(rb) / n
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb, strict=True))
    va = sum((x - ma) ** 2 for x in ra) ** 0.5
    vb = sum((y - mb) ** 2 for y in rb) ** 0.5
    return round(cov / (va * vb), 3) if va and vb else 0.0


class ReusedVault(retrieval.VaultBackend):
    """A conversation's vault an earlier run built in ``folder`` (``--vaults``), reopened."""

    def __init__(self, folder: Path, title: str) -> None:
        from gitmem import Vault
        self.vault = Vault.open(folder / "vault")
        self.title = title


def conversation_vault(conv: dict, folder: Path, title: str) -> retrieval.VaultBackend:
    """The conversation's vault, built as ``bench/retrieval.py --backend vault`` builds it
    (or reopened from ``folder`` when an earlier run built it there)."""
    if (folder / "vault" / ".git").is_dir():
        return ReusedVault(folder, title)
    be = retrieval.VaultBackend(folder, SearchConfig(), title)
    be.ingest(conv["turns"])
    return be


def eval_ranks(convs: list[dict], variants: dict[str, SearchConfig], args: argparse.Namespace,
               work: Path) -> tuple[dict[str, list[int | None]], dict[str, list[int | None]], list[Question], float]:
    """Per variant, the rank of each eval question's memory; the same per search mode of the
    vault itself (what ``gitmem eval`` reports); the questions; build seconds."""
    out: dict[str, list[int | None]] = {name: [] for name in variants}
    by_mode: dict[str, list[int | None]] = {}
    asked: list[Question] = []
    t_build = 0.0
    for conv in convs:
        folder = work / conv["name"]
        folder.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        be = conversation_vault(conv, folder, args.title)
        try:
            if "hybrid" in args.modes.split(","):
                be.vault.embed()
            t_build += time.perf_counter() - t0
            services = be.vault.services
            questions = build_questions(services, questions=args.questions, seed=args.seed)
            asked += questions
            for mode, search in searchers(services, args.modes.split(","))[0].items():
                by_mode.setdefault(mode, []).extend(ranks(questions, search))
            docs = [services.searcher.doc(services.reader.get(m.id), "") for m in services.reader.list()]
            with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
                for name, cfg in variants.items():
                    ix = SearchIndex(Path(tmp) / name, config=cfg)
                    try:
                        ix.rebuild(docs)
                        out[name] += ranks(questions, lambda q, k, ix=ix: [h.id for h in ix.search(q, limit=k).hits])
                    finally:
                        ix.close()
        finally:
            be.close()
    return out, by_mode, asked, t_build


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dataset", nargs="?", default=str(retrieval.DEFAULT_DATA))
    ap.add_argument("--variants", default=DEFAULT_VARIANTS,
                    help="comma-separated names of bench/retrieval.py's VARIANTS, or 'all'")
    ap.add_argument("--questions", type=int, default=200, help="eval questions per conversation")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--title", default="speaker-words",
                    choices=("speaker-words", "speaker", "words", "none"))
    ap.add_argument("--modes", default="lexical,hybrid" if retrieval.embedding_available() else "lexical",
                    help="the vaults' own search modes to report gitmem eval's figures for "
                         "(hybrid embeds each vault first; needs the embed extra)")
    ap.add_argument("--vaults", type=Path, default=None,
                    help="keep the conversations' vaults in this folder (outside the repository) "
                         "and reuse them on the next run")
    args = ap.parse_args(argv)
    names = list(retrieval.VARIANTS) if args.variants == "all" else args.variants.split(",")
    variants = {n: retrieval.VARIANTS[n] for n in names}
    convs = retrieval.load(Path(args.dataset))

    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
        work = args.vaults or Path(tmp)
        found, by_mode, asked, t_build = eval_ranks(convs, variants, args, work)
    rows: dict[str, dict] = {}
    for name, cfg in variants.items():
        real = retrieval.evaluate(convs, lambda t, c=cfg: retrieval.IndexBackend(t, c, args.title))
        ev = by_kind(asked, found[name])
        rows[name] = {"eval_hit@5": ev["all"].hit5, "eval_mrr": ev["all"].mrr,
                      "real_hit@5": real["hit@5"], "real_mrr": real["mrr"],
                      "eval_per_kind": {k: s.to_dict() for k, s in ev.items() if k != "all"}}
    real5 = [rows[n]["real_hit@5"] for n in names]
    report = {
        "dataset": Path(args.dataset).name, "conversations": len(convs), "seed": args.seed,
        "questions": {k: sum(1 for q in asked if q.kind == k) for k in dict.fromkeys(q.kind for q in asked)},
        "vault_build_s": round(t_build, 1),
        "spearman_hit@5": spearman([rows[n]["eval_hit@5"] for n in names], real5),
        "spearman_mrr_vs_real_hit@5": spearman([rows[n]["eval_mrr"] for n in names], real5),
        "spearman_mrr": spearman([rows[n]["eval_mrr"] for n in names], [rows[n]["real_mrr"] for n in names]),
        "spearman_per_kind_mrr_vs_real_hit@5": {
            k: spearman([rows[n]["eval_per_kind"][k]["mrr"] for n in names], real5)
            for k in dict.fromkeys(q.kind for q in asked)},
        "vault_eval": {mode: {k: sc.to_dict() for k, sc in by_kind(asked, found_ranks).items()}
                       for mode, found_ranks in by_mode.items()},
        "variants": rows,
        "load_avg": [round(x, 2) for x in os.getloadavg()],
    }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
