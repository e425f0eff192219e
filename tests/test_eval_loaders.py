"""Loaders against the real benchmark text files in ../shared/benchmarks, and their errors."""
import json
import shutil

import pytest

from compclip.eval.benchmarks.base import DataError, MissingData
from compclip.eval.checksums import mark_local
from compclip.eval.registry import get_benchmark, list_benchmarks


@pytest.fixture(scope="module")
def real_root(tmp_path_factory, shared_benchmarks):
    """A data root whose benchmark folders link to the shared files (read in place, not copied)."""
    root = tmp_path_factory.mktemp("real_root")
    for name in ("visla", "sugarcrepe", "sugarcrepe_pp"):
        (root / name).symlink_to(shared_benchmarks / name, target_is_directory=True)
    return root


def test_registry_names():
    assert {"visla", "sugarcrepe", "sugarcrepe_pp", "bivlc", "aro", "retrieval", "zeroshot",
            "visla_lexical", "left_right"} <= set(list_benchmarks())
    with pytest.raises(KeyError, match="unknown benchmark 'nope'"):
        get_benchmark("nope")


def test_visla_counts_and_fields(real_root):
    bench = get_benchmark("visla").load(real_root, require_images=False)
    assert {k: len(v) for k, v in bench.subsets.items()} == {"generic": 973, "spatial": 640}
    first = bench.subsets["generic"][0]
    assert first.image == "000000460347.jpg" and first.p1.startswith("A white with red striped bus")
    assert first.n.endswith("surrounded by several other cars.")  # CRLF stripped, text intact
    assert any('"Pub"' in t.p1 for t in bench.subsets["generic"])  # literal quotes kept
    assert all(t.n.strip() for t in bench.subsets["spatial"])
    assert any("dropped 12 rows" in n for n in bench.notes)


def test_sugarcrepe_counts(real_root):
    bench = get_benchmark("sugarcrepe").load(real_root, require_images=False)
    counts = {k: len(v) for k, v in bench.subsets.items()}
    assert counts == {"add_att": 692, "add_obj": 2062, "replace_att": 788, "replace_obj": 1652,
                      "replace_rel": 1406, "swap_att": 666, "swap_obj": 245}
    assert sum(counts.values()) == 7511


def test_sugarcrepe_pp_counts(real_root):
    bench = get_benchmark("sugarcrepe_pp").load(real_root, require_images=False)
    counts = {k: len(v) for k, v in bench.subsets.items()}
    assert counts == {"replace_att": 788, "replace_obj": 1652, "replace_rel": 1406, "swap_att": 666, "swap_obj": 245}
    assert sum(counts.values()) == 4757


def test_missing_images_give_one_message_with_the_command(real_root):
    with pytest.raises(MissingData) as err:
        get_benchmark("visla").load(real_root, require_images=True)
    msg = str(err.value)
    assert "000000460347.jpg" in msg
    assert f"python -m eval download --benchmarks visla --data-root {real_root} --images" in msg
    assert "image(s) not found" in msg and len(msg.splitlines()) < 6  # counted, not dumped


@pytest.mark.parametrize("name", ["bivlc", "aro", "retrieval", "zeroshot"])
def test_absent_benchmarks_list_their_files(tmp_path, name):
    with pytest.raises(MissingData, match=f"python -m eval download --benchmarks {name}"):
        get_benchmark(name).load(tmp_path)


def test_malformed_files_name_file_and_sample(tmp_path, shared_benchmarks):
    sc = tmp_path / "sugarcrepe"
    sc.mkdir()
    for f in (shared_benchmarks / "sugarcrepe").glob("*.json"):
        shutil.copy(f, sc / f.name)
    data = json.loads((sc / "swap_obj.json").read_text())
    mark_local(tmp_path, "tests")  # edited on purpose: not compared with the published file's sha256
    del data["7"]["negative_caption"]
    (sc / "swap_obj.json").write_text(json.dumps(data))
    with pytest.raises(DataError, match=r"swap_obj.json: item '7' lacks key\(s\) \['negative_caption'\]"):
        get_benchmark("sugarcrepe").load(tmp_path, require_images=False)

    (tmp_path / "visla").mkdir()
    (tmp_path / "visla" / "Generic_VISLA.tsv").write_text("filename\tcaption\tsecond positive\tnegative_caption\r\nx.jpg\ta\tb\r\n")
    (tmp_path / "visla" / "Spatial_VISLA.tsv").write_text("image\tsent1\r\n")
    with pytest.raises(DataError, match=r"Generic_VISLA.tsv:2: expected 4 tab-separated fields, got 3"):
        get_benchmark("visla").load(tmp_path, require_images=False)


def test_order_blind_scorer_ties_on_real_swap_items(real_root):
    """On real SugarCrepe++ swap_obj, a negative made of P1's words ties with P1 for a bag-of-words
    scorer, and T2T must count every such tie as wrong (strict >)."""
    import re
    import zlib

    import torch
    from compclip.eval.scorer import TextScorer

    class BagOfWords(TextScorer):
        def encode_texts(self, texts):
            out = torch.zeros(len(texts), 4096)
            for i, t in enumerate(texts):
                for w in re.findall(r"[a-z]+", t.lower()):
                    out[i, zlib.crc32(w.encode()) % 4096] += 1
            return torch.nn.functional.normalize(out, dim=-1)

    bench = get_benchmark("sugarcrepe_pp").load(real_root, require_images=False, subsets=["swap_obj"])
    result = bench.score(BagOfWords(), per_instance=True, progress=False)
    same_words = [sorted(re.findall(r"[a-z]+", t.p1.lower())) == sorted(re.findall(r"[a-z]+", t.n.lower()))
                  for t in bench.subsets["swap_obj"]]
    assert sum(same_words) > 100
    assert not any(r["t2t"] for r, same in zip(result.instances, same_words) if same)



def test_unknown_options_are_rejected(real_root):
    with pytest.raises(ValueError, match=r"visla: unknown option\(s\) \['subset'\]; accepted: \['subsets'\]"):
        get_benchmark("visla").load(real_root, require_images=False, subset=["generic"])
