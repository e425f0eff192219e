"""Nearest neighbours: agree with numpy brute force, exclude self and duplicates, approximate
recall is measured, and a real shard set round-trips with nn.json + keys.tsv (and resumes)."""
import io
import json

import numpy as np
import pytest
from PIL import Image

import faiss

from compclip.compat import blas
from compclip.datagen.images import knn_selfjoin
from bench.clip_like import clip_like_embeddings
from compclip.datagen.images.knn import (FIRST_NPROBE, TARGET_RECALL, BlasFlatIP, Embeddings, brute_force,
                                build_index, default_factory, embed_shard_set, find_neighbours,
                                load_embeddings, measure_recall, run_knn, tune_nprobe,
                                write_neighbours)
from compclip.datagen.images.knn_images import image_hash
from compclip.datagen.images.knn_selfjoin import self_join_topk, ties_by_id
from compclip.shardset.schema import ShardSample
from compclip.shardset.shards import KeyIndex, ShardSetWriter, iter_raw_samples, read_manifest, shard_urls, verify_shard_set
from compclip.eval.scorer import OpenClipScorer
from tests.fixtures.faults import Killed, killed_after


def table(vectors, hashes=None, valid=None):
    n = len(vectors)
    return Embeddings(vectors=vectors, keys=[f"k{i}" for i in range(n)],
                      hashes=np.arange(n, dtype=np.int64) if hashes is None else hashes,
                      valid=np.ones(n, bool) if valid is None else valid, path=None)


def unit(rng, n, d):
    x = rng.standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.mark.parametrize("k, method", [(1, "exact"), (3, "exact"), (7, "exact"), (3, "flat")])
def test_exact_matches_numpy_brute_force(k, method, monkeypatch):
    monkeypatch.setattr(BlasFlatIP.__init__, "__defaults__", (100, 96))  # many blocks, both paths
    vecs = unit(np.random.default_rng(k), 700, 24)
    ids, scores, stats = find_neighbours(table(vecs), k=k, method=method, query_chunk=128)
    ref_ids, ref_scores = brute_force(vecs, k)
    assert stats["method"] == method
    np.testing.assert_array_equal(ids, ref_ids)
    np.testing.assert_allclose(scores, ref_scores, atol=1e-5)
    assert (ids != np.arange(700)[:, None]).all()  # never itself


def tied_vectors(rng, n, d):
    """Small integers: every product is exact in float32 whatever the summation order, so equal
    products are equal bit for bit and ties are real; plus repeated rows."""
    x = rng.integers(-3, 4, (n, d)).astype(np.float32)
    x[n // 2: n // 2 + 7] = x[min(1, n - 1)]
    return x


@pytest.mark.parametrize("n", [1, 9, 63, 64, 65, 200, 517])
@pytest.mark.parametrize("data", ["unit", "ties"])
def test_self_join_equals_the_full_search(n, data):
    rng = np.random.default_rng(n)
    x = unit(rng, n, 16) if data == "unit" else tied_vectors(rng, n, 10)
    if data == "unit" and n > 20:
        x[10:14] = x[3]  # exact duplicates
    k = 8
    scores, ids = self_join_topk(x, k, block=64, probe=16)
    flat = faiss.IndexFlatIP(x.shape[1])
    flat.add(x)
    ref_scores, ref_ids = ties_by_id(*flat.search(x, min(k + 1, n)))
    np.testing.assert_allclose(scores, ref_scores[:, :k], atol=1e-5)
    # faiss keeps no fixed one of the ids tied across its k-th place, and rounds a duplicate's
    # product its own way; compare ids where neither matters (with exact products: most rows)
    if data == "ties":
        clear = np.ones(n, bool) if n <= k else ref_scores[:, k - 1] > ref_scores[:, k]
    else:
        clear = (np.abs(np.diff(ref_scores, axis=1)) > 1e-5).all(1)
    ref_ids = ref_ids[:, :k]
    assert clear.mean() > 0.3
    np.testing.assert_array_equal(ids[clear], ref_ids[clear])
    sims = x.astype(np.float64) @ x.T.astype(np.float64)
    np.testing.assert_array_equal(ids, np.argsort(-sims, axis=1, kind="stable")[:, :k])
    if data == "ties" and n > 20:
        assert (np.diff(scores, axis=1) == 0).any()  # the ties are there to break


@pytest.mark.parametrize("share", [0.0, 1.0])  # always two comparison passes / always one
def test_self_join_block_size_does_not_change_the_answer(share, monkeypatch):
    monkeypatch.setattr(knn_selfjoin, "ONE_PASS_SHARE", share)
    x = tied_vectors(np.random.default_rng(7), 300, 5)
    answers = [self_join_topk(x, 6, block=b, probe=p, threads=t)
               for b, p, t in [(300, 256, 1), (7, 3, 3), (64, 300, 2), (1000, 1, 1), (16, 8, 1)]]
    np.testing.assert_array_equal(answers[0][1], np.argsort(-(x.astype(np.float64) @ x.T), axis=1,
                                                            kind="stable")[:, :6])
    for scores, ids in answers[1:]:
        np.testing.assert_array_equal(ids, answers[0][1])
        np.testing.assert_array_equal(scores, answers[0][0])


@pytest.mark.parametrize("data", ["unit", "ties"])
def test_self_join_diagonal_blocks_by_syrk_give_the_full_products_answer(data, monkeypatch):
    """Diagonal block pairs compute one triangle (BLAS syrk); outside the checked scipy versions
    they take numpy's full product (`numpy_syrk`): the answers are the same, and syrk is really
    called on every diagonal block."""
    rng = np.random.default_rng(3)
    x = unit(rng, 333, 12) if data == "unit" else tied_vectors(rng, 333, 6)
    calls = []
    real = blas.scipy_ssyrk()
    assert real is not None  # scipy comes with scikit-learn

    def counted(x, out):
        calls.append(len(x))
        return real(x, out)
    monkeypatch.setattr(knn_selfjoin, "ssyrk", lambda: counted)
    with_syrk = [self_join_topk(x, 7, block=b, probe=16, threads=t) for b, t in [(64, 1), (50, 2), (333, 1)]]
    assert sorted(calls) == sorted([64] * 5 + [13] + [50] * 6 + [33] + [333])
    monkeypatch.setattr(knn_selfjoin, "ssyrk", lambda: blas.numpy_syrk)
    sims = x.astype(np.float64) @ x.T.astype(np.float64)
    # integer data: every product exact, ties real; unit data: rows whose top 8 are 1e-5 apart
    clear = (np.abs(np.diff(np.sort(sims, 1)[:, ::-1][:, :8], axis=1)) > 1e-5).all(1) if data == "unit" \
        else np.ones(len(x), bool)
    assert clear.mean() > 0.5
    for (scores, ids), b in zip(with_syrk, [64, 50, 333]):
        ref_scores, ref_ids = self_join_topk(x, 7, block=b, probe=16, threads=1)
        np.testing.assert_array_equal(ids[clear], ref_ids[clear])
        np.testing.assert_allclose(scores, ref_scores, atol=1e-6)
        np.testing.assert_array_equal(ids[clear], np.argsort(-sims, axis=1, kind="stable")[:, :7][clear])


def test_self_join_syrk_lets_other_threads_run():
    """The diagonal blocks' syrk runs without the GIL, so the join's threads run side by side
    (scipy's Python wrapper held the GIL for the whole product): another Python thread keeps
    running during the first half of the call."""
    import threading
    import time
    x = np.random.default_rng(0).standard_normal((3072, 512)).astype(np.float32)
    out = np.empty((3072, 3072), np.float32)
    syrk, started, done, seen, call = blas.scipy_ssyrk(), threading.Event(), threading.Event(), [], []

    def worker():
        started.set()
        t0 = time.perf_counter()
        syrk(x, out)
        call.extend([t0, time.perf_counter()])
        done.set()
    thread = threading.Thread(target=worker)
    thread.start()
    started.wait()
    while not done.is_set():
        seen.append(time.perf_counter())
    thread.join()
    t0, t1 = call
    assert t1 - t0 > 0.02  # long enough to tell
    assert sum(t0 < t < (t0 + t1) / 2 for t in seen) > 10
    np.testing.assert_allclose(np.tril(out), np.tril(x @ x.T), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("n", [130, 257])
def test_exact_neighbours_with_ties_equal_brute_force(n, monkeypatch):
    monkeypatch.setattr(BlasFlatIP.__init__, "__defaults__", (50, 64))
    x = tied_vectors(np.random.default_rng(n), n, 6)
    hashes = np.arange(n, dtype=np.int64)
    hashes[5] = hashes[6]
    hashes[n // 2: n // 2 + 7] = hashes[1]  # 8 byte-identical copies: row 1 needs the wider search
    ids, scores, _ = find_neighbours(table(x, hashes), k=3, method="exact", dup_threshold=30.0)
    ref_ids, ref_scores = brute_force(x, 3, hashes, dup_threshold=30.0)
    np.testing.assert_array_equal(ids, ref_ids)  # ties to the smaller id, retries included
    np.testing.assert_allclose(scores, ref_scores)
    assert (ref_scores[:, 1:] == ref_scores[:, :-1]).any(1).mean() > 0.3


def test_duplicates_by_bytes_and_by_similarity_are_excluded():
    rng = np.random.default_rng(0)
    vecs = unit(rng, 300, 16)
    vecs[10] = vecs[11] = vecs[12] = vecs[5]  # near-1.0 copies (e.g. re-encoded images)
    vecs[20] = vecs[21] * 0.9999 + vecs[40] * 0.0001  # almost identical
    vecs[20] /= np.linalg.norm(vecs[20])
    hashes = np.arange(300, dtype=np.int64)
    hashes[30] = hashes[31]  # byte-identical images whose embeddings differ (stand-in)
    vecs[30] = vecs[31] * 0.95 + unit(rng, 1, 16)[0] * 0.3
    vecs[30] /= np.linalg.norm(vecs[30])
    emb = table(vecs, hashes)
    ids, _, _ = find_neighbours(emb, k=3, method="exact")
    for group in ([5, 10, 11, 12], [20, 21], [30, 31]):
        for i in group:
            assert not set(ids[i]) & set(group), (i, ids[i])
            assert (ids[i] >= 0).all()  # refilled with the next nearest
    ids_, scores = find_neighbours(emb, k=3, method="exact")[:2]
    ref, ref_scores = brute_force(vecs, 3, hashes)
    np.testing.assert_allclose(scores, ref_scores, atol=1e-5)
    untied = [i for i in range(300) if len(set(np.round(ref_scores[i], 5))) == 3]
    np.testing.assert_array_equal(ids[untied], ref[untied])  # copies tie among themselves
    # without the exclusions a copy would be the top neighbour: the test can fail
    plain, _, _ = find_neighbours(table(vecs, hashes), k=3, method="exact", dup_threshold=2.0)
    assert plain[5][0] in (10, 11, 12)


def test_many_duplicates_force_a_wider_search():
    vecs = unit(np.random.default_rng(1), 60, 8)
    vecs[:20] = vecs[0]  # 20 copies: more than k + 1 + extra
    ids, _, _ = find_neighbours(table(vecs), k=3, method="exact")
    assert (ids[0] >= 20).all() and (ids[0] >= 0).all()
    np.testing.assert_array_equal(ids[:20], brute_force(vecs, 3)[0][:20])


def test_invalid_rows_get_no_neighbours_and_are_never_neighbours():
    vecs = unit(np.random.default_rng(2), 100, 8)
    valid = np.ones(100, bool)
    valid[[3, 50]] = False
    ids, _, _ = find_neighbours(table(vecs, valid=valid), k=3, method="exact")
    assert (ids[[3, 50]] == -1).all() and not np.isin(ids, [3, 50]).any()


def test_approximate_index_recall_is_measured_and_high_on_clustered_data():
    rng = np.random.default_rng(3)
    centres = unit(rng, 40, 32)
    vecs = centres[rng.integers(0, 40, 4000)] + 0.25 * rng.standard_normal((4000, 32)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    emb = table(vecs.astype(np.float32))
    ids, _, stats = find_neighbours(emb, k=3, method="approx", factory="IVF40,Flat", nprobe=8,
                                    recall_sample=300)
    ref, _ = brute_force(vecs, 3)
    true_recall = np.mean([len(set(a) & set(b)) / 3 for a, b in zip(ids, ref)])
    assert stats["method"] == "approx" and 0.85 < stats["recall"] <= 1.0
    assert abs(stats["recall"] - true_recall) < 0.05
    _, _, low = find_neighbours(emb, k=3, method="approx", factory="IVF40,Flat", nprobe=1,
                                recall_sample=300)
    assert low["recall"] < stats["recall"]  # nprobe matters: the measurement is real
    rows = np.arange(4000)  # the exact side streams chunks: tiny chunks give the same answer
    assert measure_recall(emb, rows, ids, 3, 0.999, 300, chunk=97) == stats["recall"]


def test_default_approximate_settings_reach_the_recall_target_on_hard_and_clip_like_data():
    # Uniform random vectors: neighbours barely closer than random, the hardest case for IVF
    # (16 probes of 4*sqrt(N) lists, the defaults before, give recall@3 0.67 on this set).
    hard = unit(np.random.default_rng(4), 10_000, 32)
    _, _, slow = find_neighbours(table(hard), k=3, method="approx", recall_sample=300)
    assert slow["recall"] >= 0.95
    assert slow["nprobe_tuning"]["recall"][str(slow["nprobe"])] >= TARGET_RECALL
    # CLIP-like embeddings: the same target with fewer probes, the nprobe tried first.
    clip = clip_like_embeddings(10_000)
    _, _, fast = find_neighbours(table(clip), k=3, method="approx", recall_sample=300)
    assert fast["recall"] >= 0.95 and fast["nprobe"] == FIRST_NPROBE < slow["nprobe"]
    assert fast["factory"] == default_factory(10_000)


def test_tuned_nprobe_stops_at_every_list():
    # Recall cannot reach a target above 1: the search stops at all lists probed, i.e. exact.
    vecs = unit(np.random.default_rng(5), 2000, 16)
    index = build_index(vecs, np.arange(2000), "approx", "IVF20,Flat", None)
    nprobe, tuning = tune_nprobe(index, "IVF20,Flat", table(vecs), np.arange(2000), 3, 0.999,
                                 sample=200, target=1.01)
    assert nprobe == 20 and list(tuning["recall"]) == ["8", "16", "20"]
    assert tuning["recall"]["20"] == 1.0


def jpeg(rgb, size=24):
    buf = io.BytesIO()
    pixels = np.zeros((size, size, 3), np.uint8)
    pixels[: size // 2] = rgb
    pixels[size // 2:] = rgb[::-1]
    Image.fromarray(pixels).save(buf, format="JPEG", quality=90)
    return buf.getvalue()


@pytest.fixture
def image_set(tmp_path):
    rng = np.random.default_rng(0)
    src = tmp_path / "src"
    with ShardSetWriter(src, max_count=7, features={"negatives": False}) as writer:
        for i in range(30):
            data = jpeg(tuple(int(c) for c in rng.integers(0, 256, 3)))
            if i == 9:
                data = b"\xff\xd8\xff\xe0 this is not a jpeg"
            if i in (14, 15):
                data = jpeg((10, 200, 30))  # byte-identical images
            writer.add(ShardSample(key=f"img{i:03d}", caption=f"picture {i}", image=data,
                                   meta={"i": i}))
    return src


def test_shard_set_gets_neighbours_keys_and_round_trips(image_set, tmp_path, micro_model):
    scorer = OpenClipScorer.from_loaded(micro_model, batch_size=8)
    dst = tmp_path / "dst"
    manifest = run_knn(image_set, dst, scorer, k=3, batch_size=8, max_count=8)
    assert manifest["complete"] and manifest["features"] == {"negatives": False, "neighbours": 3}
    assert sum(s["skipped"].get("corrupt_image", 0) for s in manifest["shards"]) == 1
    assert manifest["knn"]["method"] == "exact" and manifest["knn"]["not_embedded"] == 1
    assert verify_shard_set(dst) == {"samples": 29, "shards": 4, "negatives": 0, "partners": 0,
                                     "with_neighbours": 29}
    emb = load_embeddings(dst / ".knn" / "embeddings.npy")
    assert emb.vectors.dtype == np.float16 and emb.vectors.shape == (30, 32)
    good = np.flatnonzero(emb.valid)
    ref_ids, ref_scores = brute_force(emb.vectors[good].astype(np.float32), 3, emb.hashes[good])
    source = {raw["__key__"]: raw for url in shard_urls(image_set) for raw in iter_raw_samples(url)}
    index = KeyIndex(dst)
    for url in shard_urls(dst):
        for raw in iter_raw_samples(url):
            sample = ShardSample.from_wds(raw)
            row = list(good).index(emb.keys.index(sample.key))
            keys = [n.key for n in sample.neighbours]
            same = {"img015": "img014"}  # identical images tie: either may be listed
            assert {same.get(k, k) for k in keys} == {same.get(emb.keys[good[j]], emb.keys[good[j]])
                                                      for j in ref_ids[row]}
            np.testing.assert_allclose([n.score for n in sample.neighbours], ref_scores[row], atol=1e-4)
            assert "img009" not in keys and sample.key not in keys
            assert sample.image == source[sample.key]["jpg"]  # bytes copied, not re-encoded
            scores = [n.score for n in sample.neighbours]
            assert scores == sorted(scores, reverse=True)
            for key in keys:  # the trainer fetches neighbour images by key
                assert index.read(key, "jpg") == source[key]["jpg"]
    nn14 = [n.key for n in ShardSample.from_wds(next(r for u in shard_urls(dst) for r in iter_raw_samples(u)
                                                     if r["__key__"] == "img014")).neighbours]
    assert "img015" not in nn14  # identical bytes are not a neighbour


def test_embeddings_match_the_scorer_and_are_reused(image_set, tmp_path, micro_model):
    scorer = OpenClipScorer.from_loaded(micro_model, batch_size=4)
    emb = embed_shard_set(image_set, scorer, tmp_path / "e.npy", batch_size=5, dtype="float32")
    raw = next(iter_raw_samples(shard_urls(image_set)[0]))
    direct = scorer.encode_images([Image.open(io.BytesIO(raw["jpg"])).convert("RGB")]).numpy()[0]
    np.testing.assert_allclose(emb.vectors[0], direct, atol=1e-5)
    assert emb.hashes[0] == image_hash(raw["jpg"]) and emb.skipped == 1 and not emb.vectors[9].any()
    stamp = (tmp_path / "e.npy").stat().st_mtime_ns
    embed_shard_set(image_set, scorer, tmp_path / "e.npy")
    assert (tmp_path / "e.npy").stat().st_mtime_ns == stamp


def test_loader_workers_give_identical_embeddings(image_set, tmp_path, micro_model, capsys):
    scorer = OpenClipScorer.from_loaded(micro_model, batch_size=4)
    files = {}
    for workers in (0, 2, 3):
        out = tmp_path / f"w{workers}.npy"
        emb = embed_shard_set(image_set, scorer, out, batch_size=5, dtype="float32", workers=workers,
                              progress=True)
        files[workers] = (out.read_bytes(), out.with_suffix(".json").read_text())
        assert emb.skipped == 1 and not emb.valid[9] and not emb.vectors[9].any()
    assert files[2] == files[0] and files[3] == files[0]  # same rows, order, invalid marks, bytes
    assert "knn embed" in capsys.readouterr().err  # progress on stderr
    pil = embed_shard_set(image_set, PilOnly(scorer), tmp_path / "pil.npy", batch_size=5,
                          dtype="float32", workers=2)  # a scorer without tensor input: PIL images
    assert pil.path.read_bytes() == files[0][0]


class PilOnly:
    """A scorer that only takes PIL images."""

    def __init__(self, scorer):
        self.name, self._scorer = scorer.name, scorer

    def encode_images(self, images):
        assert all(isinstance(im, Image.Image) for im in images)
        return self._scorer.encode_images(images)


def test_neighbour_rewrite_resumes_byte_identical(image_set, tmp_path):
    rng = np.random.default_rng(5)
    keys = [raw["__key__"] for u in shard_urls(image_set) for raw in iter_raw_samples(u)]
    valid = np.ones(30, bool)
    valid[9] = False
    emb = Embeddings(unit(rng, 30, 8), keys, np.arange(30, dtype=np.int64), valid, None)
    ids, scores, _ = find_neighbours(emb, k=2)
    write_neighbours(image_set, tmp_path / "full", emb, ids, scores, max_count=4)
    with pytest.raises(Killed), killed_after(14):
        write_neighbours(image_set, tmp_path / "res", emb, ids, scores, max_count=4)
    part = read_manifest(tmp_path / "res")
    assert not part["complete"] and len(part["shards"]) == 3 and not (tmp_path / "res" / "keys.tsv").exists()
    write_neighbours(image_set, tmp_path / "res", emb, ids, scores, max_count=4)
    full, res = read_manifest(tmp_path / "full"), read_manifest(tmp_path / "res")
    assert [s["sha256"] for s in full["shards"]] == [s["sha256"] for s in res["shards"]]
    assert (tmp_path / "full" / "keys.tsv").read_text() == (tmp_path / "res" / "keys.tsv").read_text()
    first = next(iter_raw_samples(shard_urls(tmp_path / "res")[0]))
    assert json.loads(first["nn.json"])[0]["key"] == keys[ids[0][0]]


def test_cli_knn(image_set, tmp_path, capsys):
    from compclip.datagen.__main__ import main
    assert main(["knn", "--src", str(image_set), "--out", str(tmp_path / "o"), "--arch", "micro-vit-32",
                 "--k", "2", "--batch-size", "16", "--max-count", "100"]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert report["verified"]["with_neighbours"] == 29 and report["skipped"] == {"corrupt_image": 1}
    for stage in ("knn embed", "knn search: 2 nearest neighbours of 30 images", "knn write"):
        assert stage in captured.err, captured.err  # each long stage shows itself on stderr
    assert "30.0/30.0" in captured.err.split("knn write")[-1]  # the write pass has a bar with a total
    assert main(["knn", "--src", str(image_set), "--out", str(tmp_path / "q"), "--arch", "micro-vit-32",
                 "--k", "2", "--batch-size", "16", "--quiet"]) == 0
    assert capsys.readouterr().err == ""
    assert report["knn"]["k"] == 2 and (tmp_path / "o" / "keys.tsv").is_file()
