"""Recall a user can measure on their own vault (``gitmem eval``), with no LLM.

Questions are built from the vault's own content and history, each knowing the memory
(or memories) that answer it, then asked of each available search mode; the rank of the
first expected memory gives hit@1/5/10 and MRR, per mode and per kind of question:

* ``facts``: a memory's facts asked without its title's words (words of one sentence of
  its text: its rarest word in the vault and others at random, in their order), naming
  its author or its month now and then, as people ask;
* ``superseded``: what an older version of a memory said and its current text no longer
  does (git history), or the text of a memory marked superseded: expects the memory, or
  the one that superseded it;
* ``renamed``: a memory asked by a title or file name it had before (git history);
* ``follows``: words of the memory another one follows plus words of its own: expects the
  follower (a conversation's context chain).

A kind the vault has no material for gets no questions.  The same ``seed`` builds the
same questions from the same vault.  Answering never counts as a retrieval (no memory is
reinforced by an evaluation), and any searcher can answer (:func:`answer`): the
benchmark that checks the questions against real ones ranks search configurations with it.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..errors import InvalidInput, NotFound, NotInstalled
from ..memory.schema import Memory

if TYPE_CHECKING:  # pragma: no cover
    from ..services import Services
    from ..store.catalog import Touch

__all__ = ["KINDS", "MODES", "DEFAULT_QUESTIONS", "Question", "Scores", "EvalReport", "build_questions",
           "ranks", "by_kind", "answer", "rank_of", "score", "searchers", "evaluate"]

KINDS = ("facts", "superseded", "renamed", "follows")
MODES = ("lexical", "hybrid")
DEFAULT_QUESTIONS = 200
DEPTH = 10            # ranks past this count as a miss (hit@10, MRR@10)
_PASSES = 3           # at most this many questions of one kind about one memory

#: A searcher: ``(question, k) -> ids of the k best memories, best first``.
Searcher = Callable[[str, int], Sequence[str]]

_WORD = re.compile(r"[^\W\d_][^\W_]*(?:'[^\W\d_]+)?")
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")


@dataclass(frozen=True)
class Question:
    """One question: its kind, its text, the ids of the memories that answer it, and the
    memory it was built from."""

    kind: str
    text: str
    expected: tuple[str, ...]
    source: str

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "text": self.text, "expected": list(self.expected), "source": self.source}


@dataclass(frozen=True)
class Scores:
    """hit@1/5/10 and MRR (reciprocal rank of the first expected memory, 0 past rank 10)."""

    questions: int
    hit1: float
    hit5: float
    hit10: float
    mrr: float

    def to_dict(self) -> dict[str, Any]:
        return {"questions": self.questions, "hit@1": self.hit1, "hit@5": self.hit5,
                "hit@10": self.hit10, "mrr": self.mrr}


def score(ranks: Sequence[int | None]) -> Scores:
    """The scores of questions whose first expected memory came at these 1-based ranks
    (None: not in the first ten)."""
    n = len(ranks)
    if not n:
        return Scores(0, 0.0, 0.0, 0.0, 0.0)

    def share(k: int) -> float:
        return round(sum(1 for r in ranks if r is not None and r <= k) / n, 3)
    return Scores(n, share(1), share(5), share(DEPTH),
                  round(sum(1.0 / r for r in ranks if r is not None and r <= DEPTH) / n, 3))


@dataclass
class EvalReport:
    """What ``gitmem eval`` measured: per mode, the overall scores and those of each kind."""

    memories: int
    seed: int
    questions: dict[str, int]                        # kind -> questions built
    modes: dict[str, dict[str, Scores]]              # mode -> {"all" | kind: scores}
    skipped_modes: dict[str, str] = field(default_factory=dict)   # mode -> why not measured
    asked: list[Question] = field(default_factory=list)           # every question, in order

    def to_dict(self) -> dict[str, Any]:
        return {"memories": self.memories, "seed": self.seed, "questions": self.questions,
                "modes": {m: {k: s.to_dict() for k, s in kinds.items()} for m, kinds in self.modes.items()},
                "skipped_modes": self.skipped_modes,
                "asked": [q.to_dict() for q in self.asked]}


# --------------------------------------------------------------------- answering
def rank_of(question: Question, found: Sequence[str]) -> int | None:
    """The 1-based rank of the first expected memory among ``found`` ids (None: absent)."""
    want = {e.lower() for e in question.expected}
    return next((i + 1 for i, mid in enumerate(found[:DEPTH]) if mid.lower() in want), None)


def ranks(questions: Sequence[Question], search: Searcher,
          progress: Callable[[int, int], None] | None = None) -> list[int | None]:
    """Ask every question of ``search`` (any searcher: the vault's, or an index built
    another way); the rank of each question's first expected memory (None: not in the
    first ten).  A question the searcher cannot take (an invalid query) is a miss."""
    out: list[int | None] = []
    for done, q in enumerate(questions, 1):
        try:
            found = search(q.text, DEPTH)
        except InvalidInput:
            found = []
        out.append(rank_of(q, found))
        if progress is not None:
            progress(done, len(questions))
    return out


def by_kind(questions: Sequence[Question], found: Sequence[int | None]) -> dict[str, Scores]:
    """The scores of questions answered at ranks ``found``: overall (``"all"``) and per kind."""
    out = {"all": score(found)}
    for kind in dict.fromkeys(q.kind for q in questions):
        out[kind] = score([r for q, r in zip(questions, found, strict=True) if q.kind == kind])
    return out


def answer(questions: Sequence[Question], search: Searcher,
           progress: Callable[[int, int], None] | None = None) -> dict[str, Scores]:
    """Ask every question of ``search``; the scores overall (``"all"``) and per kind."""
    return by_kind(questions, ranks(questions, search, progress))


# --------------------------------------------------------------------- questions
class _Words:
    """The words of the vault's memories, as the search index sees them (stop words out,
    stems to compare), and how many memories hold each stem."""

    def __init__(self, memories: Sequence[Memory]) -> None:
        from ..search.query import QUESTION_WORDS
        from ..search.rank import SearchConfig
        from ..search.whoosh.schema import Analysis
        self.an = Analysis(SearchConfig())
        self.skip = QUESTION_WORDS
        self.df: dict[str, int] = {}
        for m in memories:
            for s in set(self.stems(m.body)):
                self.df[s] = self.df.get(s, 0) + 1

    def content(self, text: str) -> list[str]:
        """Content words of ``text`` in order (letters first, three characters or more)."""
        stop = self.an.stop
        return [w for w in (m.group(0) for m in _WORD.finditer(text))
                if len(w) >= 3 and w.lower() not in stop and w.lower() not in self.skip]

    def stems(self, text: str) -> list[str]:
        return [self.an.stem(w.lower()) for w in self.content(text)]

    def pick(self, words: Sequence[str], n: int, rng: random.Random, avoid: set[str]) -> list[str]:
        """Up to ``n`` of ``words`` (none whose stem is in ``avoid``, no stem twice): the
        rarest in the vault and others at random (as a person recalls one distinctive word
        and some ordinary ones), in their order in the text."""
        seen: dict[str, int] = {}
        for i, w in enumerate(words):
            s = self.an.stem(w.lower())
            if s not in avoid and s not in seen:
                seen[s] = i
        if not seen:
            return []
        stems = sorted(seen, key=lambda s: (self.df.get(s, 0), seen[s]))
        chosen = stems[:1] + rng.sample(stems[1:], min(len(stems) - 1, n - 1))
        return [words[seen[s]] for s in sorted(chosen, key=seen.__getitem__)]


def _sentences(body: str) -> list[str]:
    return [s.strip(" -*#>\t") for s in _SENTENCE.split(body or "") if s.strip(" -*#>\t")]


def _month(iso: Any) -> str | None:
    try:
        return datetime.fromisoformat(str(iso).replace("Z", "+00:00")).strftime("%B %Y")
    except ValueError:
        return None


def _name_words(path: str) -> str:
    stem = path.rsplit("/", 1)[-1].removesuffix(".md")
    return " ".join(w for w in re.split(r"[-_\s]+", stem) if w)


class _Builder:
    """The questions of one vault, kind by kind (each kind a lazy stream)."""

    def __init__(self, services: Services, memories: list[Memory], seed: int) -> None:
        self.services = services
        self.memories = sorted(memories, key=lambda m: m.id)
        self.by_id = {m.id: m for m in self.memories}
        self.words = _Words(self.memories)
        self.seed = seed
        self._log: list[tuple[str, Touch]] | None = None

    def rng(self, kind: str) -> random.Random:
        # One stream per kind: choosing other kinds does not change this kind's questions.
        return random.Random(f"{self.seed}:{kind}")

    def shuffled(self, items: Iterable[Any], rng: random.Random) -> list[Any]:
        out = list(items)
        rng.shuffle(out)
        return out

    def title_stems(self, m: Memory) -> set[str]:
        return set(self.words.stems(m.title)) | set(self.words.stems(_name_words(m.path)))

    def about(self, m: Memory, words: list[str], rng: random.Random) -> str:
        """A plain-language question about ``words``, naming the memory's author or the
        month it was written now and then, as a person asking would."""
        topic = " ".join(words)
        agent = str(m.meta.get("agent") or "").strip()
        month = _month(m.meta.get("created"))
        roll = rng.random()
        if agent and roll < 0.6:
            return f"What did {agent} say about {topic}?"
        if month and roll < 0.8:
            return f"What was noted in {month} about {topic}?"
        return f"What do I know about {topic}?"

    # ------------------------------------------------------------------ kinds
    def facts(self) -> Iterator[Question]:
        rng = self.rng("facts")
        # A small vault is asked about each memory again (other words) on later passes.
        for m in (m for _ in range(_PASSES) for m in self.shuffled(self.memories, rng)):
            avoid = self.title_stems(m)
            sentences = [s for s in _sentences(m.body) if len(self.words.content(s)) >= 2]
            if not sentences:
                continue
            words = self.words.pick(self.words.content(rng.choice(sentences)), rng.choice((2, 3, 4)), rng, avoid)
            if len(words) >= 2:
                yield Question("facts", self.about(m, words, rng), (m.id,), m.id)

    def touch_log(self) -> list[tuple[str, Touch]]:
        if self._log is None:
            self._log = self.services.history.touch_log()
        return self._log

    def versions(self) -> dict[str, list[Touch]]:
        out: dict[str, list[Touch]] = {}
        for mid, touch in self.touch_log():
            if touch.path is not None:
                out.setdefault(mid, []).append(touch)
        return out

    def read_at(self, touch: Touch) -> Memory | None:
        assert touch.path is not None
        data = self.services.store.git.read_at(touch.commit.encode(), touch.path)
        return None if data is None else self.services.reader.memory_from_bytes(touch.path, data)

    def superseded(self) -> Iterator[Question]:
        rng = self.rng("superseded")
        versions = self.versions()
        candidates = [(m, "edit") for m in self.memories if len(versions.get(m.id, ())) > 1]
        for m in self.services.reader.list(status="superseded"):
            successor = str(m.meta.get("superseded_by") or "")
            if successor in self.by_id:
                candidates.append((m, "superseded"))
        for m, how in self.shuffled(sorted(candidates, key=lambda c: (c[0].id, c[1])), rng):
            expected: tuple[str, ...]
            if how == "superseded":
                old = self.services.reader.get(m.id)
                words = self.words.pick(self.words.content(old.body), rng.choice((3, 4)), rng,
                                        self.title_stems(old))
                expected = (str(m.meta["superseded_by"]), m.id)
            else:
                now = set(self.words.stems(m.body))
                earlier = [v for v in (self.read_at(t) for t in versions[m.id][:-1]) if v is not None]
                gone = [w for v in earlier for w in self.words.content(v.body)
                        if self.words.an.stem(w.lower()) not in now]
                words = self.words.pick(gone, rng.choice((2, 3, 4)), rng, self.title_stems(m))
                expected = (m.id,)
            if len(words) >= 2:
                yield Question("superseded", f"What did the note say earlier about {' '.join(words)}?",
                               expected, m.id)

    def renamed(self) -> Iterator[Question]:
        rng = self.rng("renamed")
        versions = self.versions()
        for mid in self.shuffled(sorted(mid for mid in versions if mid in self.by_id), rng):
            m = self.by_id[mid]
            names: list[str] = []
            for touch in versions[mid][:-1]:
                assert touch.path is not None
                old_name = _name_words(touch.path)
                if old_name.lower() != _name_words(m.path).lower():
                    names.append(old_name)     # (the same name in another folder is a move)
                old = self.read_at(touch)
                if old is not None and old.title.strip().lower() != m.title.strip().lower():
                    names.append(old.title)
            names = list(dict.fromkeys(n for n in names if len(self.words.content(n)) >= 1))
            if names:
                yield Question("renamed", f"Where is the note called {rng.choice(names)}?", (mid,), mid)

    def follows(self) -> Iterator[Question]:
        rng = self.rng("follows")
        chained = [m for m in self.memories if str(m.meta.get("follows") or "") in self.by_id]
        for m in (m for _ in range(_PASSES) for m in self.shuffled(chained, rng)):
            before = self.by_id[str(m.meta["follows"])]
            avoid = self.title_stems(m)
            own = self.words.pick(self.words.content(m.body), rng.choice((1, 2)), rng, avoid)
            earlier = self.words.pick(self.words.content(before.body), 2, rng,
                                      avoid | {self.words.an.stem(w.lower()) for w in own})
            if own and earlier:
                yield Question("follows", self.about(m, earlier + own, rng), (m.id,), m.id)


def build_questions(services: Services, *, questions: int = DEFAULT_QUESTIONS, seed: int = 0,
                    kinds: Sequence[str] | None = None) -> list[Question]:
    """Up to ``questions`` questions about the vault's active memories, taken kind by kind
    in turn (a kind with no material left yields its turn to the others); the same
    ``seed`` gives the same questions for the same vault."""
    chosen = _check_kinds(kinds)
    if isinstance(questions, bool) or not isinstance(questions, int) or questions < 1:
        raise InvalidInput("questions must be a positive integer")
    services.reader.scan()
    memories = [services.reader.get(m.id) for m in services.reader.list()]
    if not memories:
        raise NotFound("the vault has no memories to build questions from",
                       hint="Add memories first (gitmem add), then run gitmem eval.")
    builder = _Builder(services, memories, seed)
    streams = {k: getattr(builder, k)() for k in chosen}
    out: list[Question] = []
    seen: set[tuple[str, str, str]] = set()
    while streams and len(out) < questions:
        for kind in list(streams):
            q = next(streams[kind], None)
            while q is not None and _topic(q) in seen:   # the same words asked once
                q = next(streams[kind], None)
            if q is None:
                del streams[kind]
                continue
            seen.add(_topic(q))
            out.append(q)
            if len(out) >= questions:
                break
    return out


def _topic(q: Question) -> tuple[str, str, str]:
    """What a question asks about, whatever its phrasing."""
    return q.kind, q.source, q.text.rsplit(" about ", 1)[-1].lower()


def _check_kinds(kinds: Sequence[str] | None) -> tuple[str, ...]:
    if kinds is None:
        return KINDS
    unknown = [k for k in kinds if k not in KINDS]
    if unknown or not kinds:
        raise InvalidInput(f"unknown question kind(s): {', '.join(unknown) or '(none given)'}",
                           hint=f"Kinds: {', '.join(KINDS)}")
    return tuple(dict.fromkeys(kinds))


# --------------------------------------------------------------------- modes
def searchers(services: Services, modes: Sequence[str] | None) -> tuple[dict[str, Searcher], dict[str, str]]:
    """The vault's searchers of ``modes`` (None: every available one) and, for modes left
    out, why.  Asking for hybrid by name without the extra or vectors is an error."""
    if modes is not None:
        unknown = [m for m in modes if m not in MODES]
        if unknown or not modes:
            raise InvalidInput(f"unknown search mode(s): {', '.join(unknown) or '(none given)'}",
                               hint=f"Modes: {', '.join(MODES)}")
    wanted = tuple(dict.fromkeys(modes or MODES))
    searcher = services.searcher
    out: dict[str, Searcher] = {}
    skipped: dict[str, str] = {}
    # (record=False: a measurement is not a use; the hits are not counted as retrievals)
    if "lexical" in wanted:
        out["lexical"] = lambda q, k: [h.id for h in searcher.search(q, limit=k, hybrid=False, record=False).hits]
    if "hybrid" in wanted:
        missing = searcher.hybrid_unavailable()
        if missing is None:
            out["hybrid"] = lambda q, k: [h.id for h in searcher.search(q, limit=k, hybrid=True, record=False).hits]
        elif modes is not None and "hybrid" in modes:
            raise NotInstalled(f"hybrid evaluation needs vectors: {missing[0]}", hint=missing[1])
        else:
            skipped["hybrid"] = missing[0]
    return out, skipped


def evaluate(services: Services, *, questions: int = DEFAULT_QUESTIONS, seed: int = 0,
             kinds: Sequence[str] | None = None, modes: Sequence[str] | None = None,
             progress: Callable[[int, int], None] | None = None) -> EvalReport:
    """Build up to ``questions`` questions from the vault (``kinds``: some of
    :data:`KINDS`, default all) and answer them with each search mode (``modes``: some of
    :data:`MODES`, default every available one; hybrid needs the ``embed`` extra and
    vectors).  ``progress(done, total)`` counts questions answered over all modes."""
    modes_of, skipped = searchers(services, modes)
    asked = build_questions(services, questions=questions, seed=seed, kinds=kinds)
    total, base = len(asked) * len(modes_of), 0
    results: dict[str, dict[str, Scores]] = {}
    for mode, search in modes_of.items():
        def step(done: int, _n: int, offset: int = base) -> None:
            if progress is not None:
                progress(offset + done, total)
        results[mode] = answer(asked, search, step)
        base += len(asked)
    counts = {k: sum(1 for q in asked if q.kind == k) for k in _check_kinds(kinds)}
    return EvalReport(memories=len(services.reader.list()), seed=seed, questions=counts, modes=results,
                      skipped_modes=skipped, asked=asked)
