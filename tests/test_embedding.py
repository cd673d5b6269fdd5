"""Hybrid search: the embedding model (numpy and ONNX Runtime), the vector cache, fusion,
``gitmem embed``, purge, and the cost-free lexical path without the extra.  Tests that
need the ``embed`` extra skip cleanly without it."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest
from click.testing import CliRunner

from gitmem import Vault
from gitmem.cli.main import cli
from gitmem.search.embedding import available
from gitmem.search.hybrid import fuse
from gitmem.search.vectors import embed_text

from .conftest import FakeClock

needs_extra = pytest.mark.skipif(not available(), reason='needs pip install "gitmem-vault[embed]"')


def test_import_gitmem_loads_no_numpy() -> None:
    code = ("import sys, gitmem, gitmem.search.whoosh, gitmem.search.vectors, gitmem.search.hybrid, gitmem.search.embedding, "
            "gitmem.outside.follow, gitmem.cli.main\n"
            "from gitmem.search.embedding import available; available()\n"
            "assert not [m for m in ('numpy', 'onnxruntime', 'tokenizers', 'safetensors') "
            "if m in sys.modules], sorted(sys.modules)")
    subprocess.run([sys.executable, "-W", "error", "-c", code], check=True)


def test_fuse_adds_normalised_lexical_and_cosine() -> None:
    scores = fuse([("a", 10.0), ("b", 5.0)], {"b": 0.9, "c": 0.5}, weight=1.0)
    assert scores == pytest.approx({"a": 1.0, "b": 1.4, "c": 0.5})
    assert fuse([("a", 3.0)], {}, weight=1.0) == {"a": 1.0}        # no vector: lexical alone
    rrf = fuse([("a", 3.0), ("b", 1.0)], {"b": 0.9}, method="rrf")
    assert rrf["b"] > rrf["a"]
    mm = fuse([], {"x": 0.2, "y": 0.6}, method="minmax")
    assert mm == pytest.approx({"x": 0.0, "y": 1.0})


def test_embed_text_puts_own_words_first() -> None:
    assert embed_text("Trip", "We fly to Lisbon", "asked: where to?") == "Trip\nWe fly to Lisbon\nasked: where to?"
    assert embed_text("We fly", "We fly to Lisbon") == "We fly to Lisbon"


# --- the model ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def models():
    if not available():
        pytest.skip('needs pip install "gitmem-vault[embed]"')
    from gitmem.search.embedding import Embedder
    numpy_model = Embedder(backend="numpy")
    try:
        fast = Embedder(backend="onnx")
    except ImportError:
        fast = None
    return numpy_model, fast


@pytest.mark.slow
@needs_extra
def test_vectors_match_the_published_model(models) -> None:
    numpy_model, fast = models
    # sentence-transformers' all-MiniLM-L6-v2 gives these first values for this sentence
    want = [0.0676569, 0.0634959, 0.0487131, 0.0793050, 0.0374480]
    for model in filter(None, (numpy_model, fast)):
        vec = model.embed(["This is an example sentence"])[0]
        assert vec[:5] == pytest.approx(want, abs=2e-5)
        assert float((vec * vec).sum()) == pytest.approx(1.0, abs=1e-5)


@needs_extra
def test_backends_agree_and_batches_do_not_change_vectors(models) -> None:
    numpy_model, fast = models
    texts = ["short", "a somewhat longer sentence about Lisbon trips " * 3, "", "Ünïcödé ✓ 日本語"]
    one_by_one = [numpy_model.embed([t])[0] for t in texts]
    batched = numpy_model.embed(texts)
    for a, b in zip(one_by_one, batched):
        assert abs(a - b).max() < 1e-5
    if fast is not None:
        assert abs(fast.embed(texts) - batched).max() < 1e-5
        assert fast.backend == "onnx"
    long = numpy_model.embed(["word " * 2000])          # cut at the model's 256 pieces
    assert long.shape == (1, 384)


@needs_extra
def test_meaning_not_words(models) -> None:
    model = models[1] or models[0]
    q, spain, milk = model.embed(["a holiday in a European country", "We fly to Madrid in May",
                                  "Buy milk and eggs"])
    assert float(q @ spain) > float(q @ milk) + 0.1


# --- the vault ---------------------------------------------------------------------------------

@pytest.fixture
def hv(tmp_path: Path, clock: FakeClock) -> Iterator[Vault]:
    if not available():
        pytest.skip('needs pip install "gitmem-vault[embed]"')
    v = Vault.init(tmp_path / "hv", author="tester", clock=clock)
    v.add("Trip plans", "We fly to Madrid and Barcelona in May.", tags=["travel"])
    v.add("Groceries", "Buy milk, eggs and bread.", tier="mid_term")
    v.add("Old trip", "The Rome holiday was lovely.", tags=["travel"])
    v.archive(["Old trip"])
    yield v
    v.close()


@pytest.mark.slow
@needs_extra
def test_hybrid_finds_meaning_and_respects_filters(hv: Vault) -> None:
    query = "holiday in a European country"
    assert hv.search(query).mode != "hybrid" and hv.search(query).total == 0   # no vectors yet
    assert hv.embed()["embedded"] == 3
    page = hv.search(query)
    assert page.mode == "hybrid" and page.hits[0].title == "Trip plans"
    assert "Old trip" not in [h.title for h in page.hits]             # archived stays hidden
    assert "Old trip" in [h.title for h in hv.search(query, include_inactive=True).hits]
    assert {h.tier for h in hv.search(query, tier="mid_term").hits} <= {"mid_term"}
    assert {h.title for h in hv.search("something to eat", tier="mid_term").hits} == {"Groceries"}
    assert hv.search(query, hybrid=False).total == 0                 # words only
    assert hv.search("tag:travel AND Madrid").mode == "syntax"        # syntax stays lexical
    fresh = hv.add("Flights", "Cheap flights to Lisbon in June.")       # no vector yet
    assert fresh.id in [h.id for h in hv.search("Lisbon flights").hits]
    assert hv.embed()["embedded"] == 1 and hv.embed()["embedded"] == 0


@needs_extra
def test_changed_and_removed_memories_lose_their_vectors(hv: Vault) -> None:
    from gitmem.search.vectors import VectorStore, vector_dir
    q = hv.add("Question", "Where shall we eat?")
    a = hv.add("Answer", "The sushi place.", follows=q.id)
    hv.embed()["embedded"]
    store = VectorStore(vector_dir(hv.services.store.state_dir))
    before = store.stored()
    hv.update(q.id, body="Where shall we eat tonight?")
    assert hv.embed()["embedded"] == 2                     # the edited memory and its follower
    after = store.stored()
    assert after[a.path] != before[a.path]
    hv.delete(a.id, hard=True)
    hv.embed()["embedded"]
    assert a.path not in store.stored()


@needs_extra
def test_purge_drops_the_purged_vector(hv: Vault) -> None:
    from gitmem.search.vectors import VectorStore, vector_dir
    secret = hv.add("Secret", "The door code is 4711.")
    hv.embed()["embedded"]
    store = VectorStore(vector_dir(hv.services.store.state_dir))
    assert secret.path in store.stored()
    hv.purge(secret.id)
    assert secret.path not in store.stored() and len(store.stored()) == 3


@needs_extra
def test_cli_embed_and_search_flags(hv: Vault) -> None:
    runner = CliRunner()
    out = runner.invoke(cli, ["--vault", str(hv.root), "embed", "--json"], catch_exceptions=False)
    assert out.exit_code == 0 and '"embedded": 3' in out.output
    out = runner.invoke(cli, ["--vault", str(hv.root), "search", "--json", "European holiday"])
    assert '"mode": "hybrid"' in out.output
    out = runner.invoke(cli, ["--vault", str(hv.root), "search", "--json", "--lexical", "European holiday"])
    assert '"mode": "hybrid"' not in out.output
    out = runner.invoke(cli, ["--vault", str(hv.root), "embed", "--rebuild", "--json"])
    assert '"embedded": 3' in out.output


@needs_extra
@pytest.mark.slow
def test_background_worker_embeds_new_memories(hv: Vault) -> None:
    from gitmem.search.vectors import VectorStore, vector_dir
    assert hv.start_embedding() is None                 # no vectors yet: not started
    hv.embed()["embedded"]
    worker = hv.start_embedding()
    assert worker is not None
    try:
        made = hv.add("New", "A note written while the worker runs.")
        worker.nudge()
        deadline = time.monotonic() + 30
        while made.path not in VectorStore(vector_dir(hv.services.store.state_dir)).stored():
            assert time.monotonic() < deadline, "the worker never embedded the new memory"
            time.sleep(0.1)
    finally:
        worker.stop()


@pytest.mark.slow
@needs_extra
def test_hybrid_applies_the_neighbour_prior_once_after_fusion(tmp_path: Path) -> None:
    """Of two memories saying the same, the one that follows the best hit ranks first in
    hybrid search too; the lexical ranking it fuses carries no prior of its own."""
    from gitmem.search.embedding import get_embedder
    from gitmem.search.hybrid import hybrid_search
    from gitmem.search.vectors import VectorStore
    from gitmem.search.whoosh import IndexDoc, SearchConfig, SearchIndex

    def doc(path: str, title: str, body: str, follows: str | None = None) -> IndexDoc:
        return IndexDoc(path=path, id=path[:-3], title=title, body=body, hash="h",
                        follows=follows)
    docs = [doc("q.md", "Question", "Do you have any pets at home?"),
            doc("a.md", "Reply", "Yes, a dog named Rex.", follows="q"),
            doc("o.md", "Reply", "Yes, a dog named Rex.")]
    store = VectorStore(tmp_path / "vectors")
    vectors = get_embedder().embed([embed_text(d.title, d.body) for d in docs])
    store.save({d.path: ("", v) for d, v in zip(docs, vectors, strict=True)})
    results = {}
    for name, cfg in (("on", SearchConfig(context_weight=0.0)),
                      ("off", SearchConfig(context_weight=0.0, neighbour_weight=0.0))):
        with SearchIndex(tmp_path / name, config=cfg) as ix:
            ix.upsert(docs)
            lexical = {h.path: h.score for h in ix.search("pets dog", neighbours=False).hits}
            assert lexical["a.md"] == lexical["o.md"]
            page = hybrid_search(ix, store, get_embedder(), "pets dog")
            results[name] = {h.path: h.score for h in page.hits}
    assert results["off"]["a.md"] == results["off"]["o.md"]
    assert results["on"]["a.md"] > results["on"]["o.md"]
