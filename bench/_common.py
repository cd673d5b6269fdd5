"""Small helpers shared by the gitmem benchmarks: percentiles, timing, machine info,
the generated corpus, vaults of a given size made by ``gitmem init --from`` (kept for
reuse with ``--keep``), and /proc readings of child processes."""

from __future__ import annotations

import json
import math
import os
import random
import platform
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from gitmem.vault import Vault


def percentile(values: Sequence[float], pct: float) -> float:
    """The ``pct``-th percentile (0-100) of ``values``, nearest-rank with linear interpolation."""
    if not values:
        return math.nan
    ordered = sorted(values)
    pos = (len(ordered) - 1) * pct / 100.0
    low, high = math.floor(pos), math.ceil(pos)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def summary_ms(seconds: Sequence[float]) -> dict[str, float | int]:
    """p50/p95/max/mean of durations given in seconds, reported in milliseconds."""
    ms = [s * 1000.0 for s in seconds]
    if not ms:
        return {"n": 0}
    return {"n": len(ms), "p50_ms": round(percentile(ms, 50), 3), "p95_ms": round(percentile(ms, 95), 3),
            "max_ms": round(max(ms), 3), "mean_ms": round(statistics.fmean(ms), 3)}


def timed(func: Callable[[], Any]) -> tuple[float, Any]:
    """Run ``func`` once; return (seconds, result)."""
    start = time.perf_counter()
    result = func()
    return time.perf_counter() - start, result


def cpu_timed(func: Callable[[], Any]) -> tuple[float, float, Any]:
    """Run ``func`` once; return (wall seconds, this process's CPU seconds, result)."""
    start, cpu = time.perf_counter(), time.process_time()
    result = func()
    return time.perf_counter() - start, time.process_time() - cpu, result


def timed_create(vault: "Vault", spec: dict[str, Any]) -> tuple[Any, float, float, float, float]:
    """One whole create as a user waits for it: ``vault.add(**spec)`` (commit, search
    index, MEMORY.md) then ``vault.flush()`` (the ``.git/index`` update otherwise
    deferred).  Returns (memory, total wall s, CPU s, add s, flush s)."""
    start, cpu = time.perf_counter(), time.process_time()
    memory = vault.add(**spec)
    mid = time.perf_counter()
    vault.flush()
    end = time.perf_counter()
    return memory, end - start, time.process_time() - cpu, mid - start, end - mid


def loadavg() -> list[float]:
    """The 1, 5 and 15 minute load averages, rounded."""
    return [round(x, 2) for x in os.getloadavg()]


def proc_cpu_seconds(pid: int, children: bool = False) -> float:
    """CPU seconds (user + system) of running process ``pid`` so far, from /proc; with
    ``children``, plus those of its children it has waited for."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(v) for v in fields[11:15 if children else 13]) / os.sysconf("SC_CLK_TCK")


def proc_peak_rss_mib(pid: int) -> float:
    """Peak resident set size (``VmHWM``) of running process ``pid``, in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return math.nan


def report(result: dict[str, Any], out: str | os.PathLike[str] | None = None) -> None:
    """Print the benchmark's JSON result on stdout and, with ``--out``, save it to a file."""
    text = json.dumps(result, indent=2)
    print(text)
    if out:
        Path(out).write_text(text + "\n", encoding="utf-8")


def log(message: str) -> None:
    """Progress line on stderr (stdout is reserved for the JSON result)."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _ram_gb() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return None


def _git_version() -> str | None:
    try:
        out = subprocess.run(["git", "--version"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.strip().removeprefix("git version ")


def machine_info(path: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """CPU, cores, RAM, OS, Python, dulwich and git versions (and the file system of ``path``)."""
    try:
        import dulwich
        dulwich_version = ".".join(map(str, dulwich.__version__))
    except ImportError:  # pragma: no cover
        dulwich_version = None
    info: dict[str, Any] = {
        "cpu": _cpu_model(), "cores": os.cpu_count(), "ram_gb": _ram_gb(),
        "os": f"{platform.system()} {platform.release()}", "python": platform.python_version(),
        "dulwich": dulwich_version, "git": _git_version(),
        "loadavg_1_5_15": [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None,
    }
    if path is not None:
        try:
            out = subprocess.run(["df", "-T", str(path)], capture_output=True, text=True, check=True).stdout
            info["tmp_filesystem"] = out.splitlines()[1].split()[1]
        except (OSError, subprocess.CalledProcessError, IndexError):
            pass
    return info


# ----------------------------------------------------------------- corpus
LIVE_TIERS = ("short_term", "mid_term", "long_term")
TYPES = ("memory", "episodic", "semantic", "procedural", "fact", "preference", "skill", "task",
         "correction", "goal", "rule", "constraint")
ADJ = """quick stable legacy nightly shared remote local flaky strict verbose minimal urgent weekly
internal public cached async typed secure noisy default custom preferred broken deprecated
experimental manual automatic careful detailed concise recurring pending critical""".split()
NOUN = """deploy pipeline database migration schema token budget user report dashboard invoice
meeting review branch release cluster query cache index backup server client roadmap sprint
customer contract dataset model prompt agent tool memory config secret vault laptop editor
terminal theme shortcut calendar reminder email thread ticket incident alert metric log trace
api endpoint webhook queue worker scheduler cron container image registry package dependency
license test fixture benchmark profile budget hotel flight trip recipe garden invoice""".split()
VERB = """prefers avoids needs expects reviews deploys schedules rotates archives tracks rejects
approves migrates documents caches retries escalates summarises benchmarks refactors pins
monitors batches validates""".split()
NAMES = "Alice Bob Priya Chen Omar Lucia Kenji Fatima Sven Amara Diego Yuki".split()
TAGS = """work personal infra python rust frontend backend ops security finance travel health
family reading music research writing ml data devops testing docs design meeting followup
urgent idea bug decision lesson howto""".split()


def _pseudo_words(rng: random.Random, count: int) -> list[str]:
    """``count`` distinct pronounceable words (a stand-in for a real vocabulary's long tail)."""
    onsets = "b bl br c ch cl cr d dr f fl fr g gl gr h j k l m n p pl pr r s sc sh sk sl sp st t th tr v w z".split()
    vowels = "a e i o u ai ea ee ie oo ou".split()
    codas = ["", "", "n", "r", "s", "t", "l", "m", "nd", "st", "ck", "ng"]
    seen: set[str] = set()
    while len(seen) < count:
        word = "".join(rng.choice(onsets) + rng.choice(vowels) + rng.choice(codas)
                       for _ in range(rng.randint(1, 3)))
        if len(word) > 2:
            seen.add(word)
    return sorted(seen)


class Generator:
    """Deterministic generator of realistic memories (title, Markdown body, tags, type, tier).

    Words follow a Zipf distribution (exponent 1.07, like English text) over a
    ~20k-word vocabulary: a few hundred frequent everyday words, then a long
    tail.  A tiny vocabulary would make every query match most documents,
    which real memories never do.
    """

    VOCABULARY = 20_000

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        vocab_rng = random.Random(12345)  # the same vocabulary for every seed
        head = list(dict.fromkeys(ADJ + NOUN + VERB))
        self.vocab = head + [w for w in _pseudo_words(vocab_rng, self.VOCABULARY) if w not in head]
        weights = [1.0 / (rank + 1) ** 1.07 for rank in range(len(self.vocab))]
        total, acc = sum(weights), 0.0
        self._cum = []
        for w in weights:
            acc += w / total
            self._cum.append(acc)

    def word(self) -> str:
        """One word drawn from the Zipf distribution."""
        return self.rng.choices(self.vocab, cum_weights=self._cum)[0]

    def title(self) -> str:
        r = self.rng
        return (f"{r.choice(NAMES)} {r.choice(VERB)} {self.word()} {r.choice(NOUN)} "
                f"for the {self.word()} {r.choice(NOUN)}")

    def sentence(self) -> str:
        r = self.rng
        words = [self.word() for _ in range(r.randint(6, 18))]
        if r.random() < 0.3:
            words.insert(r.randrange(len(words)), r.choice(NAMES))
        if r.random() < 0.15:
            words.insert(r.randrange(len(words)), f"`{r.choice(NOUN)}_{r.choice(NOUN)}()`")
        if r.random() < 0.15:
            words.append(f"on 2026-{r.randint(1, 12):02d}-{r.randint(1, 28):02d}")
        return " ".join(words).capitalize() + r.choice(".....!?")

    def body(self, title: str) -> str:
        """Markdown of 0.3-5 KB (log-uniform): heading, paragraphs, a bullet list, sections."""
        r = self.rng
        target = math.exp(r.uniform(math.log(300), math.log(5000)))
        parts = [f"# {title}", " ".join(self.sentence() for _ in range(r.randint(1, 3)))]
        parts.append("\n".join(f"- {self.sentence()}" for _ in range(r.randint(2, 5))))
        while sum(len(p) + 2 for p in parts) < target:
            if r.random() < 0.3:
                parts.append(f"## {r.choice(['Context', 'Details', 'Decision', 'Follow-up', 'Notes'])}")
            parts.append(" ".join(self.sentence() for _ in range(r.randint(2, 6))))
        return "\n\n".join(parts)[: int(target) + 200].rstrip() + "\n"

    def spec(self) -> dict[str, Any]:
        """Arguments for ``Vault.add``."""
        title = self.title()
        return {"title": title, "body": self.body(title), "type": self.rng.choice(TYPES),
                "tier": self.rng.choice(LIVE_TIERS), "tags": self.rng.sample(TAGS, self.rng.randint(1, 4))}


def populate_bulk(vault: Vault, gen: Generator, n: int) -> tuple[list[tuple[str, str]], dict[str, Any]]:
    """N memories as ONE commit via ``GitStore.commit_files``, then ``scan`` + ``sync_history``."""
    from gitmem.store.git import FileChange
    from gitmem.memory.paths import memory_relpath, slugify
    from gitmem.memory.schema import clean_metadata, new_id, ordered
    changes, ids, sizes = [], [], []
    start = time.perf_counter()
    now = vault.now()
    for i in range(n):
        spec = gen.spec()
        mid = new_id()
        meta = ordered(clean_metadata({"id": mid, "title": spec["title"], "type": spec["type"],
                                       "tier": spec["tier"], "status": "active", "tags": spec["tags"],
                                       "created": now, "updated": now, "agent": vault.author.name},
                                      tiers=vault.config.tiers))
        data = vault.services.pipeline.render(meta, spec["body"])  # the same bytes vault.add writes
        changes.append(FileChange(memory_relpath(spec["tier"], mid, f"{slugify(spec['title'])}-{i}",
                                                 layout=vault.config.layout), data))
        ids.append((mid, spec["type"]))
        sizes.append(len(data))
    with vault.services.store.lock.hold():
        vault.services.store.git.commit_files(changes, f"bench: bulk populate {n} memories", vault.author)
    vault.scan()
    vault.services.history.sync_history()
    seconds = time.perf_counter() - start
    return ids, {"mode": "bulk (one commit via GitStore.commit_files, then scan + sync_history)",
                 "seconds": round(seconds, 2), "memories_per_s": round(n / seconds, 1),
                 "avg_file_bytes": round(statistics.fmean(sizes))}


def make_corpus(folder: Path, n: int, seed: int = 7, tiers: bool = False) -> dict[str, Any]:
    """``n`` notes in ``folder/areaA/topicT/note-I.md`` with frontmatter and some links.

    With ``tiers``, each note goes under a tier folder (``folder/mid_term/areaA/...``,
    the generator's tier), which ``gitmem init --from`` keeps; otherwise every note
    lands in the import tier."""
    gen, rng = Generator(seed), random.Random(seed)
    size = 0
    for i in range(n):
        spec = gen.spec()
        sub = (folder / spec["tier"] if tiers else folder) / f"area{i % 32}" / f"topic{i // 32 % 32}"
        sub.mkdir(parents=True, exist_ok=True)
        body = spec["body"]
        if i and rng.random() < 0.3:
            body += f"\nSee [[note-{rng.randrange(i)}]].\n"
        text = (f"---\ntitle: {spec['title']}\ntype: {spec['type']}\n"
                f"tags: [{', '.join(spec['tags'])}]\n---\n{body}")
        (sub / f"note-{i}.md").write_text(text, encoding="utf-8")
        size += len(text.encode())
        if (i + 1) % 10_000 == 0:
            log(f"corpus: {i + 1}/{n}")
    return {"notes": n, "bytes": size, "folders": min(n, 1024)}


# ----------------------------------------------------------------- vaults of a given size
SCALE_HELP = ("memories in the vault, made as a user would: a generated corpus imported with "
              "`gitmem init --from`")
KEEP_HELP = ("folder keeping generated vaults (vault-N-seedS) for later runs; a run works on a "
             "copy (generating 100,000 memories takes minutes)")
BENCH_ENV = {"GITMEM_AUTHOR": "bench <bench@gitmem.local>"}


def add_scale_options(parser: Any, default: int | None) -> None:
    """``--scale N`` and ``--keep DIR`` on an argparse parser."""
    parser.add_argument("--scale", type=int, default=default, help=SCALE_HELP)
    parser.add_argument("--keep", type=Path, help=KEEP_HELP)


def copy_tree(src: Path, dest: Path) -> None:
    """``cp -a`` (keeps modification times, which gitmem's catalog compares)."""
    subprocess.run(["cp", "-a", str(src), str(dest)], check=True)


def _gitmem_commit() -> str | None:
    out = subprocess.run(["git", "-C", str(Path(__file__).resolve().parent.parent), "rev-parse", "HEAD"],
                         capture_output=True, text=True)
    return out.stdout.strip() or None


def bench_vault(n: int, dest: Path, keep: Path | None = None, seed: int = 7) -> dict[str, Any]:
    """Make a vault of ``n`` generated memories at ``dest`` (which must not exist) the way
    a user would: :func:`make_corpus` (spread over the three tiers) then ``python -m
    gitmem init --from CORPUS VAULT`` in a child process.  With ``keep``, a vault kept
    there by an earlier run is copied instead, and a new one is kept for later runs.
    Returns how the vault was made (and how long it took)."""
    name = f"vault-{n}-seed{seed}"
    stamp = keep / f"{name}.json" if keep else None
    if keep and stamp and stamp.exists() and (keep / name).is_dir():
        log(f"copying the kept vault {keep / name}")
        seconds, _ = timed(lambda: copy_tree(keep / name, dest))
        info = {**json.loads(stamp.read_text()), "reused_from": str(keep / name), "copy_s": round(seconds, 1)}
        if info.get("gitmem_commit") != _gitmem_commit():
            info["made_by_another_gitmem_commit"] = True
            log(f"warning: {keep / name} was made by gitmem {info.get('gitmem_commit')}, not the HEAD checked out")
        return info
    corpus = dest.parent / f"corpus-{n}"
    shutil.rmtree(corpus, ignore_errors=True)
    log(f"generating a corpus of {n} notes")
    corpus_s, made = timed(lambda: make_corpus(corpus, n, seed, tiers=True))
    log(f"gitmem init --from ({n} notes)")
    start, before = time.perf_counter(), os.times()
    proc = subprocess.run([sys.executable, "-m", "gitmem", "init", "--from", str(corpus), str(dest), "--json"],
                          capture_output=True, text=True, cwd=dest.parent, env={**os.environ, **BENCH_ENV})
    wall, after = time.perf_counter() - start, os.times()
    shutil.rmtree(corpus, ignore_errors=True)
    if proc.returncode != 0:
        raise RuntimeError(f"gitmem init --from failed ({proc.returncode}): {proc.stderr[-2000:]}")
    imported = json.loads(proc.stdout)["memories"]
    if imported != n:
        raise RuntimeError(f"gitmem init --from imported {imported} of {n} notes")
    info = {"memories": n, "seed": seed, "made_by": "make_corpus(tiers=True) + gitmem init --from",
            "corpus": made, "corpus_s": round(corpus_s, 1), "init_from_wall_s": round(wall, 1),
            "init_from_cpu_s": round(after.children_user + after.children_system
                                     - before.children_user - before.children_system, 1),
            "gitmem_commit": _gitmem_commit(), "made": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    log(f"vault of {n} memories made in {wall:.1f} s")
    if keep and stamp:
        keep.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(keep / name, ignore_errors=True)
        copy_tree(dest, keep / name)
        stamp.write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
        info["kept_in"] = str(keep / name)
    return info


def index_segments(root: Path) -> int:
    """Segments of the vault's search index: the distinct segment names among the files of
    ``.git/gitmem/index`` (``MAIN_<segment>.seg`` and the like)."""
    folder = root / ".git" / "gitmem" / "index"
    names = {p.stem for p in folder.glob("MAIN_*.*") if p.suffix not in (".toc", "") and p.name != "MAIN_WRITELOCK"}
    return len(names)
