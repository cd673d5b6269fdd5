"""``reflect``: the consolidation loop agent memory tools describe, made inspectable.

Planning is pure: :func:`plan_reflect` turns memory states, retrieval counts,
near-duplicate pairs, the clock and the settings into a :class:`ReflectPlan`.
Applying it is one commit whose message lists the counts and every file (after a
pure-rename commit when memories change tier), so a person can read, diff or
revert what consolidation did.  ``--dry-run`` prints
the plan and changes nothing.

The steps, in order (protected types are never touched by any of them):

1. **expire** - ``prospective`` and ``task`` memories past ``expires`` go to the archive;
2. **prune** - effective strength below ``reflect.prune_below`` (0.05) goes to the archive;
3. **merge** - active memories of the same type and scope whose similarity is above
   ``reflect.merge_above`` (0.95) become one memory (the newest text, tags unioned,
   sources archived with ``merged_into``);
4. **promote** - ``episodic`` memories of the first tier older than
   ``promote_after_days`` and retrieved at least ``promote_min_retrievals`` times
   move one tier up as ``semantic``;
5. **fold** - retrieval counts gathered since the last reflect (kept in
   ``.git/gitmem/``, so reading never makes a commit) are written into the
   frontmatter (``retrievals``, ``strength``, ``reinforced``);
6. ``MEMORY.md`` is regenerated (as in every commit).

Strength: the stored ``strength`` (1.0 when absent) halves every
``half_life_days[tier] * importance / 3`` days since the memory was last
updated, reinforced or retrieved; each retrieval adds 0.1 (capped at 1.0).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import safefs
from ..config import Identity, LifecycleSettings
from ..memory.markdown import split_body
from ..memory.schema import MAX_RETRIEVALS, MetadataProblem, derive, iso_now, ordered
from ..memory.similarity import similarity
from ..store.git import FileChange

if TYPE_CHECKING:  # pragma: no cover
    from ..store.reader import Reader
    from ..store.storage import Storage
    from ..write.pipeline import WritePipeline
    from .lifecycle import Lifecycle
    from .memories import Memories

__all__ = ["Reflect", "ReflectPlan", "ReflectReport", "MemoryState", "plan_reflect",
           "effective_strength"]

_RETRIEVAL_BOOST = 0.1
_EXPIRING = ("prospective", "task")


@dataclass(frozen=True)
class MemoryState:
    """What planning needs to know about one memory."""

    id: str
    path: str
    title: str
    type: str
    tier: str
    status: str
    scope: str | None
    importance: int
    strength: float
    updated: str
    created: str
    reinforced: str | None = None
    expires: str | None = None
    retrievals: int = 0          # folded into the frontmatter by earlier reflects
    pending: int = 0             # retrievals since the last reflect
    last_retrieved: float | None = None
    protected: bool = False
    writable: bool = True        # False: its file has bad metadata; no step rewrites it


@dataclass
class Action:
    """One planned change of one memory."""

    id: str
    path: str
    title: str
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class ReflectPlan:
    """Everything a reflect would do, without doing it."""

    now: str
    expire: list[Action] = field(default_factory=list)
    prune: list[Action] = field(default_factory=list)
    merge: list[list[Action]] = field(default_factory=list)
    promote: list[Action] = field(default_factory=list)
    fold: list[Action] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.expire or self.prune or self.merge or self.promote or self.fold)

    def counts(self) -> dict[str, int]:
        return {"pruned": len(self.prune), "merged": len(self.merge),
                "promoted": len(self.promote), "expired": len(self.expire),
                "reinforced": len(self.fold)}

    def to_dict(self) -> dict[str, Any]:
        return {"now": self.now, "expire": [asdict(a) for a in self.expire],
                "prune": [asdict(a) for a in self.prune],
                "merge": [[asdict(a) for a in g] for g in self.merge],
                "promote": [asdict(a) for a in self.promote], "fold": [asdict(a) for a in self.fold]}


@dataclass
class ReflectReport:
    """What :meth:`Reflect.reflect` did (or, with ``dry_run``, would do)."""

    pruned: int = 0
    merged: int = 0
    promoted: int = 0
    expired: int = 0
    reinforced: int = 0
    duration_ms: int = 0
    dry_run: bool = False
    busy: bool = False
    commit: str | None = None
    plan: ReflectPlan | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"pruned": self.pruned, "merged": self.merged, "promoted": self.promoted,
                "expired": self.expired, "reinforced": self.reinforced,
                "duration_ms": self.duration_ms, "dry_run": self.dry_run, "busy": self.busy,
                "commit": self.commit, "plan": self.plan.to_dict() if self.plan else None}


def _epoch(iso: str | None) -> float | None:
    if not iso or not isinstance(iso, str):
        return None
    try:
        return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
    except (ValueError, OverflowError, OSError):  # year 1 / 9999 in local time: out of range
        return None


def _number(value: Any, default: float, low: float, high: float) -> float:
    """A finite number in [low, high] from a catalog row, else ``default``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return default
    return float(value) if low <= value <= high else default  # NaN fails the comparison


def _text_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def effective_strength(state: MemoryState, now: float, settings: LifecycleSettings) -> float:
    """The memory's strength at ``now`` (decayed since its last use, see module doc)."""
    anchors = [t for t in (_epoch(state.updated), _epoch(state.created), _epoch(state.reinforced),
                           state.last_retrieved) if t is not None]
    age_days = max(0.0, (now - max(anchors)) / 86400) if anchors else 0.0
    half = settings.half_life_days.get(state.tier)
    if not half:
        return state.strength
    half *= max(1, state.importance) / 3
    return state.strength * 0.5 ** (age_days / half)


def plan_reflect(states: Sequence[MemoryState], pairs: Iterable[tuple[str, str, float]],
                 now: datetime, settings: LifecycleSettings, live_tiers: Sequence[str]) -> ReflectPlan:
    """The reflect plan for these memories (pure: no I/O, no clock of its own).

    ``pairs`` are (id, id, similarity) of near-duplicate candidates."""
    t = now.timestamp()
    plan = ReflectPlan(iso_now(now))
    by_id = {s.id: s for s in states}
    eligible = {s.id for s in states if s.status == "active" and not s.protected
                and s.writable and s.tier in live_tiers}
    done: set[str] = set()
    for s in sorted(states, key=lambda s: s.path):
        if s.id not in eligible:
            continue
        expires = _epoch(s.expires)
        if s.type in _EXPIRING and expires is not None and expires < t:
            plan.expire.append(Action(s.id, s.path, s.title, {"expires": s.expires}))
            done.add(s.id)
            continue
        strength = effective_strength(s, t, settings)
        if strength < settings.prune_below and not s.pending:
            plan.prune.append(Action(s.id, s.path, s.title, {"strength": round(strength, 4)}))
            done.add(s.id)
    # Near-duplicates: union-find over pairs of eligible, same type and scope memories.
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b, score in sorted(pairs):
        sa, sb = by_id.get(a), by_id.get(b)
        if (sa and sb and score > settings.merge_above and {a, b} <= eligible and not {a, b} & done
                and (sa.type, sa.scope) == (sb.type, sb.scope)):
            parent[find(a)] = find(b)
    groups: dict[str, list[MemoryState]] = {}
    for x in parent:
        groups.setdefault(find(x), []).append(by_id[x])
    for group in sorted(groups.values(), key=lambda g: min(s.path for s in g)):
        if len(group) > 1:
            group.sort(key=lambda s: (s.updated, s.path), reverse=True)   # newest first
            plan.merge.append([Action(s.id, s.path, s.title) for s in group])
            done.update(s.id for s in group)
    first = live_tiers[0]
    for s in sorted(states, key=lambda s: s.path):
        if s.id not in eligible or s.id in done:
            continue
        created = _epoch(s.created)
        if (s.type == "episodic" and s.tier == first and len(live_tiers) > 1 and created is not None
                and (t - created) / 86400 >= settings.promote_after_days
                and s.retrievals + s.pending >= settings.promote_min_retrievals):
            plan.promote.append(Action(s.id, s.path, s.title, {"to": live_tiers[1],
                                                               "retrievals": s.retrievals + s.pending}))
            done.add(s.id)
    for s in sorted(states, key=lambda s: s.path):
        if (s.pending and s.id not in done and s.status == "active" and s.writable
                and s.tier in live_tiers):
            strength = min(1.0, effective_strength(s, t, settings) + _RETRIEVAL_BOOST * s.pending)
            plan.fold.append(Action(s.id, s.path, s.title, {
                "retrievals": s.retrievals + s.pending, "strength": round(strength, 4),
                "reinforced": iso_now(datetime.fromtimestamp(s.last_retrieved or t, UTC))}))
    return plan


class Reflect:
    """Consolidation of a vault: plan, then one commit."""

    _reflect_guard = threading.Lock()   # one reflect at a time in this process

    def __init__(self, store: Storage, reader: Reader, pipeline: WritePipeline,
                 memories: Memories, lifecycle: Lifecycle) -> None:
        self.store = store
        self.reader = reader
        self.pipeline = pipeline
        self.memories = memories
        self.lifecycle = lifecycle

    def reflect(self, dry_run: bool = False, *,
                author: str | Identity | None = None) -> ReflectReport:
        """Consolidate the vault (see :mod:`gitmem.ops.reflect`): one commit, or none when
        there is nothing to do or ``dry_run``.  A reflect started while another runs
        (in any process) returns at once with zero counts and ``busy=True``."""
        import filelock
        started = time.perf_counter()
        if not Reflect._reflect_guard.acquire(blocking=False):
            return ReflectReport(busy=True, dry_run=dry_run)
        try:
            cross = filelock.FileLock(str(Path(self.store.state_dir) / "reflect.lock"), timeout=0)
            try:
                cross.acquire()
            except filelock.Timeout:
                return ReflectReport(busy=True, dry_run=dry_run)
            try:
                return self._reflect(dry_run, author, started)
            finally:
                cross.release()
        finally:
            Reflect._reflect_guard.release()

    def _reflect(self, dry_run: bool, author: str | Identity | None,
                 started: float) -> ReflectReport:
        who = self.store.author_of(author)
        with self.store.lock.hold():
            self.reader.scan()
            states, pairs, now = self._reflect_states(), self._near_duplicates(), self.store.clock()
            plan = plan_reflect(states, pairs, now, self.store.config.lifecycle, self.store.config.live_tiers)
            bad = self._files_with_bad_metadata(plan)
            if bad:
                # Consolidation never rewrites a file whose frontmatter holds bad values: it
                # would silently replace them by defaults.  Left as the person wrote it (doctor
                # reports it); planning again can only drop actions, so no new file comes in.
                states = [replace(s, writable=False) if s.path in bad else s for s in states]
                plan = plan_reflect(states, pairs, now, self.store.config.lifecycle, self.store.config.live_tiers)
            counts = plan.counts()
            report = ReflectReport(dry_run=dry_run, plan=plan, pruned=counts["pruned"], merged=counts["merged"],
                                   promoted=counts["promoted"], expired=counts["expired"],
                                   reinforced=counts["reinforced"])
            if not dry_run and not plan.empty:
                report.commit = self._apply_plan(plan, who)
                self.store.catalog.clear_retrievals([a.id for a in plan.fold + plan.promote]
                                              + [a.id for g in plan.merge for a in g]
                                              + [a.id for a in plan.prune + plan.expire])
        report.duration_ms = int((time.perf_counter() - started) * 1000)
        return report

    def _files_with_bad_metadata(self, plan: ReflectPlan) -> set[str]:
        """Paths the plan would rewrite whose frontmatter has problems (see schema.derive)."""
        paths = {a.path for a in plan.expire + plan.prune + plan.promote + plan.fold}
        paths.update(a.path for g in plan.merge for a in g)
        bad: set[str] = set()
        for path in sorted(paths):
            try:
                memory, parsed = self.reader.read_parsed(path)
            except OSError:
                bad.add(path)
                continue
            problems: list[MetadataProblem] = []
            derive(path, parsed.meta, parsed.body, tiers=self.store.config.tiers, problems=problems,
                   outside_notes=self.store.config.outside_notes)
            if problems or memory.problems:
                bad.add(path)
        return bad

    def _reflect_states(self) -> list[MemoryState]:
        pending = self.store.catalog.retrievals()
        out = []
        for row in self.store.catalog.all_rows():
            if row.problem:
                continue
            m = row.meta
            n, last = pending.get(row.id, (0, None))
            # Rows hold sanitised metadata (schema.derive); each value is still checked here
            # so no file's value can make planning raise and stop every later reflect.
            own = row.path.split("/", 1)[0] not in self.store.config.tiers
            out.append(MemoryState(
                id=row.id, path=row.path, title=str(m.get("title", "")), type=str(m.get("type", "memory")),
                tier=str(m.get("tier", "")), status=str(m.get("status", "active")),
                scope=_text_or_none(m.get("scope")),
                importance=int(_number(m.get("importance"), 3, 1, 5)),
                strength=_number(m.get("strength"), 1.0, 0.0, 1.0),
                updated=str(m.get("updated") or ""), created=str(m.get("created") or ""),
                reinforced=_text_or_none(m.get("reinforced")), expires=_text_or_none(m.get("expires")),
                retrievals=int(_number(m.get("retrievals"), 0, 0, MAX_RETRIEVALS)), pending=n,
                last_retrieved=float(last) if last is not None else None,
                # A person's own notes (outside the tier folders of an adopted vault) are theirs:
                # reflect never archives, merges, promotes or rewrites them.
                protected=str(m.get("type", "memory")) in self.store.config.protected_types or own,
                writable=not own))
        return out

    def _near_duplicates(self) -> list[tuple[str, str, float]]:
        """(id, id, similarity) of active, unprotected memory pairs above ``merge_above``."""
        threshold = self.store.config.lifecycle.merge_above
        rows: dict[str, Any] = {}
        bodies: dict[str, str] = {}
        out = []
        for a, b in self.store.catalog.similar_pairs():
            for p in (a, b):
                if p not in rows:
                    rows[p] = self.store.catalog.row(p)
            ra, rb = rows[a], rows[b]
            if not ra or not rb or any(r.meta.get("type") in self.store.config.protected_types
                                       for r in (ra, rb)):
                continue
            for p in (a, b):
                if p not in bodies:   # the body only: no YAML parse needed to compare texts
                    data = safefs.read_or_none(self.store.root, p)
                    text = split_body(data.decode("utf-8", "replace")) if data is not None else ""
                    bodies[p] = text or str(rows[p].meta.get("title", ""))
            score = similarity(bodies[a], bodies[b])
            if score > threshold:
                out.append((ra.id, rb.id, score))
        return out

    def _apply_plan(self, plan: ReflectPlan, who: Identity) -> str:
        now = plan.now
        archive = self.store.config.archive_tier
        changes: list = []
        touched: list[tuple[str, str | None, str]] = []
        lines: list[str] = []
        changed_ids = ({a.id for a in plan.expire + plan.prune + plan.promote + plan.fold}
                       | {a.id for g in plan.merge for a in g})
        for action, why in [(a, "expired") for a in plan.expire] + [(a, "pruned") for a in plan.prune]:
            memory, parsed = self.pipeline.current(action.path)
            extra: dict[str, Any] = {"updated": now}
            if why == "pruned":
                extra["strength"] = max(0.0, min(1.0, action.detail["strength"]))
            moved, new_path = self.memories.move_changes(memory, parsed, archive, extra)
            changes += moved
            touched.append((memory.id, new_path, "archive"))
            lines.append(f"{why}: {memory.title} ({memory.path})")
        reserved: set[str] = set()
        for group in plan.merge:
            sources = [self.pipeline.current(a.path) for a in group]
            newest = sources[0][0]
            mems = [m for m, _ in sources]
            more, more_touched, _, _ = self.lifecycle.merge_changes(sources, newest.title, newest.body, who,
                                                           reserved=reserved, skip=changed_ids)
            changes += more
            touched += more_touched
            changed_ids.update(t[0] for t in more_touched)
            lines.append(f"merged: {', '.join(m.title for m in mems)} -> {newest.title}")
        for action in plan.promote:
            memory, parsed = self.pipeline.current(action.path)
            moved, new_path = self.memories.move_changes(memory, parsed, action.detail["to"],
                                                 {"type": "semantic", "updated": now,
                                                  "retrievals": action.detail["retrievals"]})
            changes += moved
            touched.append((memory.id, new_path, "promote"))
            lines.append(f"promoted: {memory.title} ({memory.path} -> {new_path})")
        for action in plan.fold:
            memory, parsed = self.pipeline.current(action.path)
            meta = ordered(dict(memory.meta, **action.detail, origin=self.pipeline.origin_of(memory)))
            changes.append(FileChange(memory.path, self.pipeline.render(meta, memory.body, parsed.raw_blocks)))
            touched.append((memory.id, memory.path, "reinforce"))
            lines.append(f"reinforced: {memory.title} (retrievals {action.detail['retrievals']}, "
                         f"strength {action.detail['strength']})")
        counts = plan.counts()
        subject = "reflect: " + ", ".join(f"{k} {v}" for k, v in counts.items() if v)
        done = self.pipeline.commit(changes, subject, "reflect", touched, author=who,
                            body="\n".join(lines))
        return done.sha
