"""``gitmem doctor``: check a vault's health, and repair what git can repair.

Checks (each a :class:`Finding`):

* ``frontmatter``: memory files whose frontmatter cannot be parsed or is not
  UTF-8 (they stay readable as plain Markdown; gitmem never rewrites them);
* ``metadata``: parsed frontmatter with invalid values (unknown type, a tier
  that disagrees with the folder, ...); duplicate ids;
* ``index``: search-index entries missing, stale or left over;
* ``vectors``: the vectors cache of hybrid search (``.git/gitmem/vectors/vectors.npz``)
  readable and well-formed (a damaged one is never used: search falls back to
  words); how many memories lack a current vector is a note;
* ``worktree``: memory files changed on disk but not committed;
* ``git-index``: ``.git/index`` out of step with HEAD (``git status`` noise);
* ``temp-files``: temp files left by an interrupted write;
* ``fsck``: repository integrity (``git fsck`` when git is installed, else a
  dulwich check of every object reachable from HEAD);
* ``catalog``: gitmem's SQLite cache readable, in step with the files and
  with history (the memory -> commits table);
* ``git-locks``: lock files a killed git or gitmem process left in ``.git``
  (``index.lock``, ``refs/**.lock``, per-object ``.lock``), older than a minute;
* ``recovery``: what crash recovery did (``.git/gitmem/recovery.log``; an
  interrupted write is finished automatically by the next process that takes
  the vault lock, see :mod:`gitmem.store.recovery`);
* ``secrets``: memory files holding what looks like a secret (files a person
  saved are committed as they are; this is where they are reported);
* ``memory-index``: ``MEMORY.md`` out of date (after a ``git pull`` or a commit
  made with the git CLI); repaired by a commit that regenerates it;
* ``history``: a commit the refs reach names a parent that is missing (checked
  first: when it fails, it is the only finding); repaired by copying the commits
  above the gap without the missing parent.

``repair=True`` fixes: the search index (re-index the differing files), a damaged
vectors file (replaced by an empty one under the vault lock, then every memory embedded
again after it is released, when the ``embed`` extra is installed; deleted otherwise),
``.git/index``, leftover temp files, the catalog (rebuilt from the files and
history), stale lock files, ``MEMORY.md`` and a history gap (the only history it
rewrites: commits above a missing parent).  It never edits a memory file; it says
what it did.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .. import safefs
from ..errors import InvalidInput
from ..memory.markdown import parse_text
from ..memory.schema import clean_metadata, derive
from ..sync.quarantine import remove_refused_objects

if TYPE_CHECKING:  # pragma: no cover
    from pathlib import Path

    from ..services import Services

__all__ = ["Finding", "diagnose"]


@dataclass
class Finding:
    """The result of one check."""

    check: str
    ok: bool
    summary: str
    paths: list[str] = field(default_factory=list)
    details: dict[str, str] = field(default_factory=dict)
    repaired: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"check": self.check, "ok": self.ok, "summary": self.summary}
        if self.paths:
            out["paths"] = self.paths
        if self.details:
            out["details"] = self.details
        if self.repaired:
            out["repaired"] = self.repaired
        return out


def diagnose(services: Services, *, repair: bool = False) -> list[Finding]:
    """Run every check (and optional repairs); returns the findings in order."""
    with services.store.lock.hold():
        history = _history(services, repair)
        if not history.ok:   # every other check reads history: it would only fail on the same gap
            return [history]
        catalog = _catalog(services, repair)
        locks = _git_locks(services, repair)  # first: a stale index.lock would block the index repair
        services.reader.scan()
        vectors = _vectors(services, repair)
        findings = [_frontmatter(services), _metadata(services), _index(services, repair), vectors,
                    _worktree(services), _git_index(services, repair), _temp_files(services, repair),
                    _fsck(services, repair), catalog, locks, _recovery(services), _secrets(services),
                    _memory_index(services, repair), _links(services), _held_config(services),
                    _proposals(services), _layout(services), _sync(services), history]
    if vectors.repaired:
        _embed_again(services, vectors)   # outside the lock: embedding takes a while, writers go on
    return findings


def _history(services: Services, repair: bool) -> Finding:
    """Every commit a branch, tag or HEAD reaches is here.  A commit naming a missing
    parent (left by a gitmem older than this one when a purge ran in another
    process during a sync: a merge with the old history, whose old side was then
    pruned) makes every sync and every history read fail.  ``--repair`` copies each
    such commit without the missing parent (same files, message and authors) and
    moves the refs onto the copies; the missing side was old history that a purge
    had already rewritten, so nothing of the files is lost."""
    git = services.store.git
    missing, broken = _missing_parents(git)
    if not missing:
        return Finding("history", True, "every commit the refs reach is present")
    shown = ", ".join(sorted(m.decode()[:12] for m in missing))
    finding = Finding("history", False,
                      f"history is broken: commit(s) {shown} are missing (named as parent by "
                      f"{', '.join(sorted(b.decode()[:12] for b in broken))}); sync and history "
                      "reads fail until repaired: run gitmem doctor --repair")
    if repair:
        moved = _drop_missing_parents(git, missing)
        finding.repaired = [f"moved {name} from {old[:12]} to {new[:12]} (missing parent dropped)"
                            for name, old, new in moved]
        finding.ok = not _missing_parents(git)[0]
        if finding.ok:
            finding.summary = f"history was broken (commit(s) {shown} missing); repaired"
    return finding


def _tips(git: Any) -> dict[bytes, bytes]:
    """Branches, tags and the like (not symbolic refs) -> the commit each names."""
    from dulwich.objects import Commit, Tag
    repo = git.repo
    symrefs = set(repo.refs.get_symrefs())
    out = {}
    for name, sha in repo.refs.as_dict().items():
        if name == b"HEAD" or name in symrefs:
            continue
        try:
            obj = repo.object_store[sha]
        except KeyError:
            continue
        if isinstance(obj, Tag):
            continue   # an annotated tag on a broken commit is left to git
        if isinstance(obj, Commit):
            out[name] = sha
    return out


def _missing_parents(git: Any) -> tuple[set[bytes], set[bytes]]:
    """(missing commits, the present commits that name one as parent), walking every ref."""
    store = git.repo.object_store
    missing: set[bytes] = set()
    broken: set[bytes] = set()
    seen: set[bytes] = set()
    todo = list(set(_tips(git).values()))
    while todo:
        sha = todo.pop()
        if sha in seen:
            continue
        seen.add(sha)
        try:
            commit = store[sha]
        except KeyError:
            missing.add(sha)
            continue
        for parent in commit.parents:
            if parent not in store:
                missing.add(parent)
                broken.add(sha)
            else:
                todo.append(parent)
    return missing, broken


def _drop_missing_parents(git: Any, missing: set[bytes]) -> list[tuple[str, str, str]]:
    """Copy every commit that (through its parents) names a missing commit, without it;
    move each ref from its old commit to the copy.  Returns the moves."""
    from dulwich.objects import Commit, ObjectID
    store = git.repo.object_store
    mapped: dict[bytes, bytes | None] = {m: None for m in missing}

    def copy(sha: bytes) -> bytes | None:
        if sha in mapped:
            return mapped[sha]
        stack: list[tuple[bytes, bool]] = [(sha, False)]
        while stack:   # parents first, without recursion (histories are long)
            top, expanded = stack.pop()
            if top in mapped:
                continue
            if not expanded:
                stack.append((top, True))
                stack.extend((p, False) for p in store[top].parents if p not in mapped)
                continue
            old: Commit = store[top]
            parents: list[bytes] = []
            for parent in old.parents:
                new_parent = mapped.get(parent, parent)
                if new_parent is not None and new_parent not in parents:
                    parents.append(new_parent)
            if parents == list(old.parents):
                mapped[top] = top
                continue
            new = Commit()
            new.tree, new.parents = old.tree, [ObjectID(p) for p in parents]
            new.author, new.committer = old.author, old.committer
            new.author_time, new.commit_time = old.author_time, old.commit_time
            new.author_timezone, new.commit_timezone = old.author_timezone, old.commit_timezone
            new.encoding, new.message = old.encoding, old.message
            store.add_object(new)
            mapped[top] = new.id
        return mapped[sha]

    moves = []
    for name, sha in sorted(_tips(git).items()):
        new = copy(sha)
        if new is not None and new != sha and git.repo.refs.set_if_equals(name, sha, new,
                                                                           message=b"gitmem doctor --repair"):
            moves.append((name.decode(), sha.decode(), new.decode()))
    # Reflog entries naming a replaced commit would keep `git fsck` reporting the gap.
    replaced = {old for old, new in mapped.items() if new != old}
    _drop_reflog_entries(git.git_dir / "logs", replaced)
    return moves


def _drop_reflog_entries(logs: Path, commits: set[bytes]) -> None:
    """Remove the reflog lines whose old or new value is one of ``commits``."""
    if not commits or not logs.is_dir():
        return
    for folder, _, files in os.walk(logs):
        for name in files:
            path = os.path.join(folder, name)
            with open(path, "rb") as handle:
                lines = handle.readlines()
            keep = [line for line in lines if line[:40] not in commits and line[41:81] not in commits]
            if len(keep) != len(lines):
                tmp = path + ".tmp"
                with open(tmp, "wb") as handle:
                    handle.writelines(keep)
                os.replace(tmp, path)


def _frontmatter(services: Services) -> Finding:
    bad = {row.path: row.problem for row in services.store.catalog.all_rows() if row.problem}
    return Finding("frontmatter", not bad,
                   f"{len(bad)} file(s) with unparseable frontmatter (indexed as plain Markdown)"
                   if bad else "all frontmatter parses", sorted(bad), bad)


def _metadata(services: Services) -> Finding:
    """Parsed frontmatter with bad values (each named by its field), tiers that disagree
    with the folder, duplicate ids.  Such files are read with safe defaults (see
    :func:`gitmem.memory.schema.sanitize_metadata`) and are never rewritten to fix them."""
    details: dict[str, str] = {}
    seen: dict[str, str] = {}
    tiers = tuple(services.store.config.tiers)
    for row in services.store.catalog.all_rows():
        found: list[str] = []
        if not row.problem:  # unparseable files are the frontmatter check's
            data = safefs.read_or_none(services.store.root, row.path)
            if data is None:
                continue  # removed since the scan
            try:
                parsed = parse_text(data.decode("utf-8", "replace"))
                problems: list[Any] = []
                meta = derive(row.path, parsed.meta, parsed.body, tiers=tiers, problems=problems,
                              outside_notes=services.store.config.outside_notes)
                found = [str(p) for p in problems]
                try:
                    clean_metadata(meta, tiers=tiers)  # derive's output passes; a failure is a gitmem bug
                except InvalidInput as exc:
                    found.append(exc.message)
                written_tier, folder = parsed.meta.get("tier"), row.path.split("/", 1)[0]
                if (isinstance(written_tier, str) and written_tier and written_tier != folder
                        and not any(f.startswith("tier:") for f in found)):
                    found.append(f"tier: frontmatter says tier {written_tier[:60]!r} but the file "
                                 f"is in {folder}/")
            except Exception as exc:  # noqa: BLE001 - one odd file must not stop the doctor
                found.append(f"could not be checked ({type(exc).__name__})")
        if row.id in seen:
            found.append(f"duplicate id {row.id} (also in {seen[row.id]})")
        seen.setdefault(row.id, row.path)
        if found:
            text = "; ".join(found)
            details[row.path] = text if len(text) <= 1000 else text[:999] + "\u2026"
    return Finding("metadata", not details,
                   f"{len(details)} file(s) with invalid metadata (read with safe defaults; "
                   "gitmem does not rewrite them)" if details else "metadata is valid",
                   sorted(details), details)


def _index(services: Services, repair: bool) -> Finding:
    index = services.searcher.index  # opening catches up; so compare again to report what is still off
    on_disk = services.store.catalog.hashes()
    indexed = index.indexed()
    missing = sorted(p for p in on_disk if p not in indexed)
    stale = sorted(p for p in on_disk if p in indexed and indexed[p] != on_disk[p])
    extra = sorted(p for p in indexed if p not in on_disk)
    details = {**{p: "not indexed" for p in missing}, **{p: "indexed content is stale" for p in stale},
               **{p: "indexed but no such file" for p in extra}}
    finding = Finding("index", not details,
                      f"{len(details)} search-index entr(y/ies) out of date" if details
                      else f"search index matches the files ({len(on_disk)} memories)",
                      sorted(details), details)
    if details and repair:
        report = services.searcher.refresh()
        finding.repaired = report.indexed + report.removed
    return finding


def _vectors(services: Services, repair: bool) -> Finding:
    """The vectors file of hybrid search: absent (hybrid search off), sound, or damaged
    (never used: every hybrid search falls back to words until it is replaced)."""
    from ..search.vectors import VectorStore, vector_dir, vector_keys
    store = VectorStore(vector_dir(services.store.state_dir))
    where = os.path.relpath(store.file, services.store.root)
    if not store.exists():
        return Finding("vectors", True, "no vectors: hybrid search is off until 'gitmem embed'")
    damage = store.check()
    if damage is None:
        stored = store.stored()
        current = {p: key for p, (key, _) in vector_keys(services.store).items()}
        behind = sum(1 for p, key in current.items() if stored.get(p) != key)
        summary = f"{len(stored)} vector(s) stored"
        if behind:
            summary += (f"; {behind} memor{'y' if behind == 1 else 'ies'} without a current one (notice: "
                        "'gitmem embed', or a running gitmem watch or gitmem mcp, computes them)")
        return Finding("vectors", True, summary)
    finding = Finding("vectors", False, f"{where} is damaged ({damage}); hybrid search uses words only "
                                        "until it is rebuilt (gitmem doctor --repair, or gitmem embed)",
                      [where])
    if repair:
        store.save({}, keep={})     # an empty, sound file: the vault still has (no) vectors
        finding.repaired = [f"replaced the damaged {where} by an empty one"]
    return finding


def _embed_again(services: Services, finding: Finding) -> None:
    """After a damaged vectors file was replaced: embed every memory again when the
    ``embed`` extra is installed (the vault lock is taken only to catch up the index)."""
    from ..search.embedding import available
    if not available():
        finding.repaired.append("hybrid search needs the embed extra; after installing it, "
                                "'gitmem embed' computes the vectors")
        return
    try:
        done = services.searcher.embed()
    except Exception as exc:  # noqa: BLE001 - the file is sound already; the rest can wait for gitmem embed
        finding.repaired.append(f"embedding again failed ({type(exc).__name__}: {exc}); run 'gitmem embed'")
        return
    finding.repaired.append(f"embedded {done['embedded']} memor{'y' if done['embedded'] == 1 else 'ies'} again")


def _worktree(services: Services) -> Finding:
    changes = services.pipeline.outside.changes()
    paths = [c.path for c in changes]
    return Finding("worktree", not paths,
                   f"{len(paths)} memory file(s) changed but not committed "
                   "(gitmem watch commits them, or run git commit)" if paths else "no uncommitted memory changes",
                   paths)


def _git_index(services: Services, repair: bool) -> Finding:
    """``.git/index`` against HEAD, and every blob it names must exist.

    An index naming a blob that is gone (a purge or prune killed part-way) makes
    ``git fsck`` report a missing blob and ``git status`` show ``AD``; the
    per-path repair cannot fix that, so ``--repair`` rebuilds the whole index
    from HEAD (:meth:`GitStore.rebuild_index_from_head`).
    """
    services.store.git.flush_index()
    head_files = services.store.git.list_tree(services.store.git.head())
    index = services.store.git.repo.open_index()
    missing = _index_missing_blobs(services)
    # A conflicted entry has stages, not one sha: it disagrees with HEAD too.
    off = sorted(path for path, sha in head_files.items()
                 if path.encode() not in index or getattr(index[path.encode()], "sha", None) != sha)
    paths = sorted(set(off) | set(missing))
    details = {path: f"names blob {sha}, which is not in the repository" for path, sha in missing.items()}
    if missing:
        summary = (f".git/index names {len(missing)} missing blob(s) (git fsck reports them, "
                   "git status is wrong)")
    elif off:
        summary = f".git/index disagrees with HEAD for {len(off)} file(s) (git status shows them)"
    else:
        summary = ".git/index matches HEAD"
    finding = Finding("git-index", not paths, summary, paths, details)
    if paths and repair:
        try:
            finding.repaired = (services.store.git.rebuild_index_from_head() if missing
                                else services.store.git.repair_index())
        except Exception as exc:  # noqa: BLE001 - e.g. a running git command holds index.lock
            finding.summary += f" (not repaired: {type(exc).__name__}; is a git command running?)"
    return finding


def _index_missing_blobs(services: Services) -> dict[str, str]:
    """Paths whose ``.git/index`` entry names a blob the object store does not have."""
    store = services.store.git.repo.object_store
    missing: dict[str, str] = {}
    for path, entry in services.store.git.repo.open_index().iteritems():
        sha = getattr(entry, "sha", None)  # a conflicted entry has stages, not one sha
        if sha is None or (getattr(entry, "mode", 0) & 0o170000) == 0o160000:  # a submodule names a commit
            continue
        if sha not in store:
            missing[path.decode("utf-8", "surrogateescape")] = sha.decode()
    return missing


def _temp_files(services: Services, repair: bool) -> Finding:
    leftovers = [name for name in safefs.listdir(services.store.root, "") if safefs.TEMP_MARK in name]
    for top in safefs.listdir(services.store.root, ""):
        if top != ".git" and safefs.is_dir(services.store.root, top):
            leftovers += [rel for rel, _ in safefs.walk_files(services.store.root, top, skip_dir=lambda d: d == ".git")
                          if safefs.TEMP_MARK in rel.rsplit("/", 1)[-1]]
    return _removable(services, "temp-files", leftovers, "temp file(s) from interrupted writes",
                      "no leftover temp files", repair)


def _removable(services: Services, check: str, rels: list[str], problem: str, fine: str,
               repair: bool) -> Finding:
    """A finding listing leftover files (vault-relative) that ``--repair`` deletes."""
    finding = Finding(check, not rels, f"{len(rels)} {problem}" if rels else fine, sorted(rels))
    if rels and repair:
        for rel in rels:
            if rel.startswith(".git/"):  # git's own lock files, outside the work tree
                (services.store.root / rel).unlink(missing_ok=True)
                continue
            try:
                safefs.remove(services.store.root, rel, prune=False)
            except InvalidInput:  # a link planted on the way: never followed
                continue
        finding.repaired = sorted(rels)
    return finding


def _fsck(services: Services, repair: bool = False) -> Finding:
    git = shutil.which("git")
    if git:
        # Repair: objects a refused sync of an older gitmem left behind (nothing uses them).
        removed = remove_refused_objects(services.store.root) if repair else []
        result = subprocess.run([git, "fsck", "--no-progress", "--no-dangling"], cwd=services.store.root,
                                capture_output=True, text=True, check=False)
        text = (result.stdout + result.stderr).strip()
        return Finding("fsck", result.returncode == 0 and not text,
                       "git fsck: repository is valid" if result.returncode == 0 and not text
                       else f"git fsck reported problems: {text[:500]}",
                       repaired=[f"removed unused object {sha}" for sha in removed])
    problems = []
    head = services.store.git.head()
    if head is not None:
        store = services.store.git.repo.object_store
        for sha in services.store.git.walk_new(None, head):
            commit = services.store.git.commit(sha)
            try:
                commit.check()
                for entry in store.iter_tree_contents(commit.tree):
                    store[entry.sha].check()
            except Exception as exc:  # noqa: BLE001 - any corruption is a finding
                problems.append(f"{sha.decode()[:8]}: {exc}")
                break
    return Finding("fsck", not problems, "objects reachable from HEAD are valid (dulwich check)"
                   if not problems else f"corrupt objects: {'; '.join(problems)}")


def _catalog(services: Services, repair: bool) -> Finding:
    """The catalog cache: readable, rows in step with the files, history with HEAD.

    Rows and history are caches every read catches up lazily, so being behind
    is reported (and caught up) but is not a failure; a damaged database is
    (it is also dropped and rebuilt whenever a Vault opens it).
    """
    import sqlite3
    try:
        ok_db = services.store.catalog.quick_check()
        changed = _stale_rows(services)
    except sqlite3.DatabaseError:
        ok_db, changed = False, []
    if not ok_db:
        finding = Finding("catalog", False, "the catalog database is damaged")
        if repair:
            services.store.catalog.forget_files()
            services.store.catalog.reset_touches()
            services.reader.scan()
            services.history.sync_history()
            finding.repaired = ["rebuilt .git/gitmem/catalog.sqlite from the files and history"]
        return finding
    behind = services.history.sync_history()
    parts = []
    if changed:
        parts.append(f"re-read {len(changed)} file(s) changed since it last looked")
    if behind:
        parts.append(f"recorded the memories touched by {behind} new commit(s)")
    return Finding("catalog", True, "catalog caught up: " + "; ".join(parts) if parts
                   else "catalog matches the files and history", changed[:20])


def _stale_rows(services: Services) -> list[str]:
    known = {path: services.store.catalog.stat_of(path) for path in services.store.catalog.hashes()}
    disk = services.reader.disk_files()  # the doctor compares the cache with the disk
    stale = [p for p, st in disk.items() if known.get(p) != (st.st_mtime_ns, st.st_size)]
    return sorted(stale + [p for p in known if p not in disk])


_LOCK_AGE = 60.0  # seconds: git holds its locks for milliseconds, an editor-open commit for longer


def _git_locks(services: Services, repair: bool) -> Finding:
    """Lock files in .git that no live process is using (older than a minute)."""
    import time
    git_dir = services.store.git.git_dir
    candidates: list[Path | str] = [git_dir / "index.lock", git_dir / "HEAD.lock", git_dir / "packed-refs.lock"]
    for folder, _, files in os.walk(git_dir / "refs"):
        candidates += [os.path.join(folder, f) for f in files if f.endswith(".lock")]
    objects = git_dir / "objects"
    for sub in os.listdir(objects) if objects.is_dir() else []:
        if len(sub) == 2 and (objects / sub).is_dir():
            candidates += [objects / sub / f for f in os.listdir(objects / sub) if f.endswith(".lock")]
    now = time.time()
    stale = []
    for path in map(str, candidates):
        try:
            if now - os.stat(path).st_mtime > _LOCK_AGE:
                stale.append(os.path.relpath(path, services.store.root))
        except OSError:
            continue
    return _removable(services, "git-locks", stale, "stale lock file(s) in .git (they block git commands)",
                      "no stale lock files in .git", repair)


def _recovery(services: Services) -> Finding:
    """What crash recovery did (informational: recovery itself is automatic)."""
    log = services.store.state_dir / "recovery.log"
    try:
        lines = log.read_text(encoding="utf-8").splitlines()
    except OSError:
        lines = []
    return Finding("recovery", True,
                   f"{len(lines)} crash-recovery action(s) recorded (.git/gitmem/recovery.log), latest:"
                   if lines
                   else "no interrupted writes recovered", lines[-5:])


def _secrets(services: Services) -> Finding:
    """Memory files holding what looks like a secret (a person's edits are committed as saved)."""
    from ..memory.secrets import policy_of, scan_text
    if policy_of(services.store.config) == "allow":
        return Finding("secrets", True, "not checked (secrets: allow in .gitmem.yaml)")
    details: dict[str, str] = {}
    for row in services.store.catalog.all_rows():
        data = safefs.read_or_none(services.store.root, row.path)
        if data is None:
            continue
        found = scan_text(data.decode("utf-8", "replace"))
        if found:
            details[row.path] = ", ".join(sorted({f.kind for f in found}))
    return Finding("secrets", not details,
                   f"{len(details)} memory file(s) look like they contain a secret (redact them; "
                   "'gitmem purge ID' removes one from history)" if details
                   else "no secrets found in memory files", sorted(details), details)


def _links(services: Services) -> Finding:
    """Symbolic links in the tier folders (or as MEMORY.md / .gitmem.yaml): refused,
    never read, followed or committed."""
    links = services.reader.refused_links()
    return Finding("links", not links,
                   f"{len(links)} symbolic link(s) or non-UTF-8 file name(s) refused: gitmem never reads, "
                   "follows or commits them (replace each link with a real file or folder; rename the "
                   "file)" if links
                   else "no symbolic links in the vault", links)


def _held_config(services: Services) -> Finding:
    """Safety settings a sync brought in weaker form and that nobody accepted yet."""
    held = services.syncer.pending_config()
    details = {key: f"kept {entry['kept']!r}; .gitmem.yaml says {entry['file']!r}"
               for key, entry in held.items()}
    # Bad values of .gitmem.yaml (a person's or one that arrived by sync): held back, defaults in force.
    bad = list(services.store.config.problems)
    details.update({f"bad value {n}": f"{text} (the default is in force; fix .gitmem.yaml)"
                    for n, text in enumerate(bad, 1)})
    summary = (f"{len(held)} weaker safety setting(s) from a sync held back: review them, then "
               "'gitmem config accept'" if held else "no safety settings held back")
    if bad:
        summary += f"; {len(bad)} bad value(s) in .gitmem.yaml held back (defaults in force)"
    return Finding("config", not held and not bad, summary, sorted(held), details)


#: A flat tier folder holding more memories than this makes every write into it several
#: times dearer than in hash folders (docs/performance.md, "Layouts").
CROWDED_FOLDER = 5000


def _proposals(services: Services) -> Finding:
    """Goals, rules and constraints waiting for a person: recorded by an agent, an import
    or a sync, not in force until accepted (not a fault: the person decides)."""
    store = services.store
    rows = store.catalog.of_types(store.config.protected_types, store.config.live_tiers)
    held = [row for row, _ in rows if not store.in_force(row.meta, row.hash or None)]
    if not held:
        return Finding("proposals", True, "no goals, rules or constraints waiting to be accepted")
    return Finding("proposals", True,
                   f"{len(held)} goal(s), rule(s) or constraint(s) proposed by agents, imports or syncs, "
                   "not in force: read them ('gitmem context', 'gitmem why ID'), then 'gitmem accept ID'",
                   sorted(row.path for row in held))


def _layout(services: Services) -> Finding:
    """The vault's layout, and advice when one folder holds so many memories that
    each write into it is several times dearer than in the hashed layout."""
    layout = services.store.layout()
    per_folder: dict[str, int] = {}
    for row in services.store.catalog.all_rows():
        folder = row.path.rpartition("/")[0]
        per_folder[folder] = per_folder.get(folder, 0) + 1
    folder, most = max(per_folder.items(), key=lambda kv: kv[1], default=("", 0))
    summary = f"{layout} layout; at most {most} memories in one folder"
    if most > CROWDED_FOLDER:
        summary += (f" ({folder or 'the vault root'}): each write into it rewrites that folder's git tree; "
                    + ("'gitmem layout hashed' makes writes cheaper" if layout == "flat"
                       else "consider splitting it into folders"))
    return Finding("layout", True, summary)


def _sync(services: Services) -> Finding:
    """How the vault syncs with its remote (``gitmem status``): a note, never a failure,
    since a remote that is away for a while is normal (the next sync catches up)."""
    state = services.syncer.state.status()
    remote = state["remote"]
    if remote is None or not state["configured"]:
        return Finding("sync", True, "no remote configured")
    details: dict[str, str] = {}
    if state["last_success"] is None:
        summary = f"{remote}: never synced"
    else:
        summary = f"{remote}: last synced {state['last_success']}"
        if state["ahead"] is not None:
            summary += f" ({state['ahead']} to push, {state['behind']} to merge)"
    error = state["last_error"]
    if error:
        summary += f"; the last {state['failures']} attempt(s) failed ({error['code']}): see gitmem status"
        details["last error"] = f"{error['code']}: {error['message']} (at {error['at']})"
    if state["conflicts"]:
        summary += f"; {len(state['conflicts'])} conflict copy(ies) from syncs: see gitmem conflicts"
    return Finding("sync", True, summary, [c["copy_path"] for c in state["conflicts"]], details)


def _memory_index(services: Services, repair: bool) -> Finding:
    """MEMORY.md against the memories.  Behind only because memories were committed
    with git (``git commit``, ``git pull``) since gitmem last generated it is a
    notice (ok): the next gitmem write regenerates it.  Edited by hand (on disk or
    in the last commit that changed it) or missing is a failure."""
    import re

    from ..memory.paths import MEMORY_MD
    if not services.store.config.memory_index:
        return Finding("memory-index", True, "MEMORY.md is turned off (memory_index: false)")
    want = services.memory_md.render()
    head = services.store.git.head()
    committed = services.store.git.read_at(head, MEMORY_MD) if head else None
    on_disk = safefs.read_or_none(services.store.root, MEMORY_MD)
    if committed == want and on_disk == want:
        return Finding("memory-index", True, "MEMORY.md is up to date")

    def last_change_by_gitmem() -> bool:
        """Was MEMORY.md, as in HEAD, last written by a gitmem commit (not by hand)?"""
        sha, blob, seen = head, services.store.git.blob_sha_at(head, MEMORY_MD), 0
        while sha is not None and seen < 500:
            commit = services.store.git.commit(sha)
            parent = commit.parents[0] if commit.parents else None
            if parent is None or services.store.git.blob_sha_at(parent, MEMORY_MD) != blob:
                message = commit.message.decode("utf-8", "replace")
                return (re.search(r"^Op: *\S+", message, re.MULTILINE) is not None
                        and "(outside edit" not in message.split("\n", 1)[0])
            sha, seen = parent, seen + 1
        return False

    regenerate = ("run gitmem doctor --repair, or any write regenerates it")
    if on_disk is not None and on_disk == committed and last_change_by_gitmem():
        finding = Finding("memory-index", True, "MEMORY.md is behind memories committed with git "
                          f"since gitmem generated it (notice: {regenerate})", [MEMORY_MD])
    elif on_disk is None:
        finding = Finding("memory-index", False, f"MEMORY.md is missing ({regenerate})", [MEMORY_MD])
    else:
        finding = Finding("memory-index", False, "MEMORY.md does not match the memories: it was "
                          f"edited by hand ({regenerate})", [MEMORY_MD])
    if repair:
        # An empty change set: the commit path regenerates MEMORY.md (and first keeps a
        # person's uncommitted edit of it in history).
        services.pipeline.commit([], "index: regenerate MEMORY.md", "index", [])
        finding.repaired = ["MEMORY.md regenerated (one commit)"]
    return finding
