"""Retrieval quality and latency of gitmem search against a SQLite FTS5 baseline.

Usage (prints JSON)::

    python bench/retrieval.py [DATASET] [--backend index|vault] [--variants final,plain,...]
                              [--title speaker-words|speaker|words|none] [--scale 4]

DATASET is a file in LoCoMo's JSON format (default ``../shared/eval/locomo_dev.json``
relative to the repository root).  The data is CC BY-NC: read it from there, never copy it
into this repository.  Each dialog turn becomes one memory (type ``episodic``, body = the
turn's text plus its image caption, agent = speaker, created = session date, source =
conversation + session), one fresh index per conversation; questions of categories 1-4
are asked verbatim and scored by the rank of the first evidence turn (hit@1/5/10, MRR).
``--scale N`` also builds one index holding every conversation N times (~11k turns for
N=4 on the dev set) and reports query latency per query kind there.
"""

from __future__ import annotations

import argparse
import json
import re
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gitmem.errors import InvalidQuery  # noqa: E402
from gitmem.search import IndexDoc, SearchConfig, SearchIndex  # noqa: E402

DEFAULT_DATA = ROOT.parent / "shared" / "eval" / "locomo_dev.json"

# Ranking variants measured (each a SearchConfig); "final" is the shipped default.
_BASE = dict(title_weight=1.0, meta_weight=1.0, agent_weight=0.0, date_boost=0.0,
             group_weight=0.0, natural="any")
VARIANTS: dict[str, SearchConfig] = {
    "final": SearchConfig(),
    "plain-bm25": SearchConfig(**{**_BASE, "b": 0.75, "stemmer": "porter"}),
    "b0.25": SearchConfig(**{**_BASE, "stemmer": "porter"}),
    "+porter2": SearchConfig(**_BASE),
    "+speaker": SearchConfig(**{**_BASE, "agent_weight": 1.0}),
    "+group": SearchConfig(**{**_BASE, "agent_weight": 1.0, "group_weight": 0.3}),
    "+date": SearchConfig(**{**_BASE, "agent_weight": 1.0, "group_weight": 0.3,
                             "date_boost": 1.0}),
    "final+title1": SearchConfig(title_weight=1.0),
    "any-words": SearchConfig(natural="any"),
    "all-then-any": SearchConfig(natural="all-then-any"),
    "all-boost": SearchConfig(natural="all-boost"),
    "no-qstop": SearchConfig(question_stop=False),
}

STOPWORDS = frozenset("""a about above after again against all am an and any are as at be because been
before being below between both but by can could did do does doing down during each few for from
further had has have having he her here hers herself him himself his how i if in into is it its
itself just me more most my myself no nor not now of off on once only or other our ours ourselves
out over own same she should so some such than that the their theirs them themselves then there
these they this those through to too under until up very was we were what when where which while
who whom why will with would you your yours yourself yourselves""".split())


def load(path: Path) -> list[dict]:
    """LoCoMo samples -> [{name, turns: [...], questions: [...]}]."""
    out = []
    for n, sample in enumerate(json.loads(path.read_text(encoding="utf-8"))):
        conv, turns = sample["conversation"], []
        sessions = sorted((int(m.group(1)), k) for k in conv
                          if (m := re.fullmatch(r"session_(\d+)", k)))
        for num, key in sessions:
            date = datetime.strptime(conv[f"{key}_date_time"], "%I:%M %p on %d %B, %Y")
            for t in conv[key]:
                text = t["text"] + (f" [image: {t['blip_caption']}]" if t.get("blip_caption") else "")
                turns.append({"dia": t["dia_id"], "speaker": t["speaker"], "text": t["text"],
                              "body": text, "session": num,
                              "created": date.strftime("%Y-%m-%dT%H:%M:00Z")})
        name = sample.get("sample_id", f"conv{n}")
        questions = [{"q": q["question"], "cat": q["category"],
                      "evidence": {e for ev in q.get("evidence") or [] for e in re.split(r"[;\s]+", ev) if e}}
                     for q in sample["qa"] if q.get("category") in (1, 2, 3, 4)]
        out.append({"name": name, "turns": turns,
                    "questions": [q for q in questions if q["evidence"]]})
    return out


def make_title(turn: dict, style: str) -> str:
    words = turn["text"].split()
    first = " ".join(words[:6]) + ("…" if len(words) > 6 else "")
    return {"speaker-words": f"{turn['speaker']}: {first}", "speaker": turn["speaker"],
            "words": first, "none": ""}[style]


# --- backends: ingest(turns) once, then search(question) -> dia ids ----------------------

class IndexBackend:
    def __init__(self, tmp: Path, cfg: SearchConfig, title: str) -> None:
        self.ix = SearchIndex(tmp / "ix", config=cfg)
        self.title = title

    def ingest(self, turns: list[dict], prefix: str = "") -> None:
        self.ix.rebuild(IndexDoc(path=f"{prefix}{t['dia']}.md", id=f"{prefix}{t['dia']}",
                                 title=make_title(t, self.title), body=t["body"], hash="",
                                 type="episodic", agent=t["speaker"], created=t["created"],
                                 updated=t["created"], source=f"{prefix}{t['session']}")
                        for t in turns)

    def add_more(self, turns: list[dict], prefix: str) -> None:
        self.ix.upsert([IndexDoc(path=f"{prefix}{t['dia']}.md", id=f"{prefix}{t['dia']}",
                                 title=make_title(t, self.title), body=t["body"], hash="",
                                 type="episodic", agent=t["speaker"], created=t["created"],
                                 updated=t["created"], source=f"{prefix}{t['session']}")
                        for t in turns])

    def search(self, q: str, k: int = 10) -> list[str]:
        page = _ask(lambda text: self.ix.search(text, limit=k), q)
        return [h.path.rsplit("/", 1)[-1][:-3] for h in page.hits]

    def close(self) -> None:
        self.ix.close()


class VaultBackend:
    """Through the public Python API (``gitmem.Vault``); turn ids travel in a tag.  The
    vault uses its default SearchConfig, so ``--variants``/``--set`` do not apply here."""

    def __init__(self, tmp: Path, cfg: SearchConfig, title: str) -> None:
        from gitmem import Vault  # imported late: only this mode needs the vault
        self.vault = Vault.init(tmp / "vault")
        self.title = title

    def ingest(self, turns: list[dict], prefix: str = "") -> None:
        for t in turns:
            self.vault.add(title=make_title(t, self.title), body=t["body"], type="episodic",
                           agent=t["speaker"], created=t["created"],
                           source=f"{prefix}{t['session']}", tags=[_turn_tag(prefix + t["dia"])])

    add_more = ingest

    def search(self, q: str, k: int = 10) -> list[str]:
        out = []
        for h in _ask(lambda text: self.vault.search(text, limit=k), q).hits:
            tag = next((t for t in getattr(h, "tags", []) if t.startswith("turn-")), "")
            out.append(tag[5:].replace("-", ":", 1).upper() if tag else "")
        return out

    def close(self) -> None:
        getattr(self.vault, "close", lambda: None)()


def _ask(search: Callable[[str], object], q: str):
    """Ask verbatim; on a syntax error (a question with one stray quote) do what an agent
    does after reading the error: ask again without the syntax characters."""
    try:
        return search(q)
    except InvalidQuery:
        return search(re.sub(r'["()*]', " ", q))


def _turn_tag(dia: str) -> str:
    return "turn-" + dia.lower().replace(":", "-")


class Fts5Backend:
    """The reference: FTS5 porter, one row per turn '<speaker>: <text>', words OR-ed."""

    def __init__(self, tmp: Path, *_: object) -> None:
        self.db = sqlite3.connect(str(tmp / "fts.db"))
        self.db.execute("CREATE VIRTUAL TABLE t USING fts5(dia UNINDEXED, content, "
                        "tokenize='porter')")

    def ingest(self, turns: list[dict], prefix: str = "") -> None:
        self.db.executemany("INSERT INTO t(dia, content) VALUES (?, ?)",
                            [(prefix + t["dia"], f"{t['speaker']}: {t['text']}") for t in turns])
        self.db.commit()

    add_more = ingest

    def search(self, q: str, k: int = 10) -> list[str]:
        words = [w for w in re.findall(r"\w+", q.lower()) if w not in STOPWORDS]
        if not words:
            return []
        match = " OR ".join(f'"{w}"' for w in dict.fromkeys(words))
        rows = self.db.execute("SELECT dia FROM t WHERE t MATCH ? ORDER BY rank LIMIT ?",
                               (match, k)).fetchall()
        return [r[0] for r in rows]

    def close(self) -> None:
        self.db.close()


# --- measuring -------------------------------------------------------------------------

def _pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(p * len(xs)))] * 1000, 2) if xs else 0.0


def evaluate(convs: list[dict], factory: Callable[[Path], object]) -> dict:
    ranks, lat, n_docs, t_index = [], [], 0, 0.0
    for conv in convs:
        with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
            be = factory(Path(tmp))
            t0 = time.perf_counter()
            be.ingest(conv["turns"])
            t_index += time.perf_counter() - t0
            n_docs += len(conv["turns"])
            for q in conv["questions"]:
                t0 = time.perf_counter()
                got = be.search(q["q"], 10)
                lat.append(time.perf_counter() - t0)
                ranks.append(next((i + 1 for i, d in enumerate(got) if d in q["evidence"]), None))
            be.close()
    n = len(ranks)
    return {"questions": n,
            "hit@1": round(sum(1 for r in ranks if r and r <= 1) / n, 3),
            "hit@5": round(sum(1 for r in ranks if r and r <= 5) / n, 3),
            "hit@10": round(sum(1 for r in ranks if r and r <= 10) / n, 3),
            "mrr": round(sum(1 / r for r in ranks if r) / n, 3),
            "index_s": round(t_index, 2), "docs_per_s": round(n_docs / t_index),
            "query_p50_ms": _pct(lat, 0.5), "query_p95_ms": _pct(lat, 0.95)}


def query_kinds(q: str) -> dict[str, str]:
    """The same question in each query syntax (for latency only)."""
    w = [x for x in re.findall(r"[A-Za-z]+", q) if x.lower() not in STOPWORDS] or ["memory", "day"]
    w2 = (w + w)[:2]
    return {"word": q, "phrase": f'"{w2[0]} {w2[1]}"', "and": f"{w2[0]} AND {w2[1]}",
            "or": f"{w2[0]} OR {w2[1]}", "not": f"{w2[0]} NOT {w2[1]}",
            "prefix": f"{w[0][:3]}*", "filter": f"{q} type:episodic created:>2023-06-01"}


def latency(convs: list[dict], factory: Callable[[Path], object], copies: int) -> dict:
    """One index holding every conversation ``copies`` times; p50/p95 per query kind."""
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
        be = factory(Path(tmp))
        t0, n = time.perf_counter(), 0
        for c in range(copies):
            for conv in convs:
                pre = f"c{c}/{conv['name']}/"
                (be.ingest if n == 0 else be.add_more)(conv["turns"], pre)
                n += len(conv["turns"])
        t_index = time.perf_counter() - t0
        if hasattr(be, "ix"):
            be.ix.optimize()
        times: dict[str, list[float]] = {}
        qs = [q["q"] for conv in convs for q in conv["questions"]]
        for q in qs:
            for kind, text in query_kinds(q).items():
                if isinstance(be, Fts5Backend) and kind != "word":
                    continue
                t0 = time.perf_counter()
                be.search(text, 10)
                times.setdefault(kind, []).append(time.perf_counter() - t0)
        be.close()
    return {"docs": n, "index_s": round(t_index, 2),
            **{k: {"p50_ms": _pct(v, 0.5), "p95_ms": _pct(v, 0.95)} for k, v in times.items()}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dataset", nargs="?", default=str(DEFAULT_DATA))
    ap.add_argument("--backend", choices=("index", "vault"), default="index")
    ap.add_argument("--variants", default="final",
                    help="comma-separated names, or 'all': " + ", ".join(VARIANTS))
    ap.add_argument("--title", default="speaker-words",
                    choices=("speaker-words", "speaker", "words", "none"))
    ap.add_argument("--set", action="append", default=[], metavar="KNOB=VALUE",
                    help="override a SearchConfig knob for every variant, e.g. b=0.3")
    ap.add_argument("--scale", type=int, default=4,
                    help="latency index = every conversation this many times (0: skip)")
    args = ap.parse_args(argv)

    convs = load(Path(args.dataset))
    names = list(VARIANTS) if args.variants == "all" else args.variants.split(",")
    overrides = {}
    for kv in args.set:
        k, _, v = kv.partition("=")
        cur = getattr(SearchConfig(), k)
        overrides[k] = v if isinstance(cur, str) else type(cur)(v == "True" if isinstance(cur, bool) else v)
    backend = IndexBackend if args.backend == "index" else VaultBackend
    report: dict = {"dataset": Path(args.dataset).name, "backend": args.backend,
                    "title": args.title, "overrides": overrides,
                    "fts5": evaluate(convs, lambda t: Fts5Backend(t)), "variants": {}}
    for name in names:
        cfg = replace(VARIANTS[name], **overrides)
        report["variants"][name] = evaluate(convs, lambda t, c=cfg: backend(t, c, args.title))
    if args.scale:
        cfg = replace(VARIANTS["final" if "final" in names else names[0]], **overrides)
        report["latency"] = {
            "gitmem": latency(convs, lambda t: backend(t, cfg, args.title), args.scale),
            "fts5": latency(convs, lambda t: Fts5Backend(t), args.scale)}
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
