"""BiVLC (Miranda et al. 2024): bidirectional image-text compositionality, 2,933 instances.

Files: `<root>/bivlc/`, the test split of the Hugging Face dataset `imirandam/BiVLC` saved with
`datasets.Dataset.save_to_disk` (a `DatasetDict` with a `test` split is accepted too). Columns:
`image` (COCO val2017, I0), `caption` (C0), `negative_caption` (C1, SugarCrepe's), `negative_image`
(I1, generated), `type` (Replace / Swap / Add), `subtype` (Object / Attribute / Relation).
Metrics (strict, fp32; `eval.metrics.bivlc_correct`): I2T, T2I, Group and the four single
comparisons i2t_pos, i2t_neg, t2i_pos, t2i_neg, overall and per type and type/subtype.
"""
from __future__ import annotations

import numpy as np

from compclip.eval.benchmarks.base import Benchmark, BenchmarkResult, DataError, Problem
from compclip.eval.images import DatasetImage
from compclip.eval.metrics import accuracy, bivlc_correct, group_table
from compclip.eval.registry import register_benchmark
from compclip.eval.stats import ItemTable, metric

COLUMNS = ("image", "caption", "negative_caption", "negative_image", "type", "subtype")


@register_benchmark
class BiVLC(Benchmark):
    name = "bivlc"
    needs_images = True
    primary = "group"

    def _missing(self):
        folder = self.path()
        marker = [folder / "dataset_dict.json", folder / "dataset_info.json", folder / "state.json"]
        if not any(p.exists() for p in marker):
            return [Problem(self.name, f"{folder} holds no dataset saved with save_to_disk (no dataset_info.json)",
                            str(self.data_root), self.name)]
        self._read()  # opened (memory-mapped) here, so a damaged folder is a data problem before any scoring
        return []

    def _load(self):
        pass  # read by _missing

    def _read(self):
        import datasets
        folder = self.path()
        try:
            ds = datasets.load_from_disk(str(folder))
        except Exception as e:  # datasets raises several types for a broken folder
            raise DataError(f"{folder}: not a dataset saved with save_to_disk ({type(e).__name__}: "
                            f"{str(e).splitlines()[0] if str(e).strip() else ''})") from e
        if isinstance(ds, datasets.DatasetDict):
            if "test" not in ds:
                raise DataError(f"{folder}: DatasetDict has no 'test' split (splits: {list(ds)})")
            ds = ds["test"]
        missing = [c for c in COLUMNS if c not in ds.column_names]
        if missing:
            raise DataError(f"{folder}: dataset lacks column(s) {missing} (has {ds.column_names})")
        text = ds.select_columns(["caption", "negative_caption", "type", "subtype"]).to_dict()
        for i, (c0, c1) in enumerate(zip(text["caption"], text["negative_caption"])):
            if not isinstance(c0, str) or not isinstance(c1, str):
                raise DataError(f"{folder}: row {i} has a non-string caption or negative_caption")
        self.rows = text
        self.folder = str(folder)

    def _score(self, cache, per_instance):
        n = len(self.rows["caption"])
        c0, c1 = cache.texts(self.rows["caption"]), cache.texts(self.rows["negative_caption"])
        i0 = cache.images([DatasetImage(self.folder, r, "image") for r in range(n)])
        i1 = cache.images([DatasetImage(self.folder, r, "negative_image") for r in range(n)])
        masks = bivlc_correct(c0, c1, i0, i1)
        headline = {k: accuracy(m) for k, m in masks.items()}
        types = [str(t).lower() for t in self.rows["type"]]
        subtypes = [f"{t}/{str(s).lower()}" for t, s in zip(types, self.rows["subtype"])]
        categories = group_table(masks, types) | group_table(masks, subtypes)
        instances = None
        if per_instance:
            instances = [{"row": i, "type": types[i], "subtype": subtypes[i],
                          **{k: bool(m[i]) for k, m in masks.items()}} for i in range(n)]
        return BenchmarkResult(self.name, headline, categories, instances, counts={"instances": n})

    @classmethod
    def item_table(cls, instances):
        """Every correctness column over all rows; each row (one 2x2 group) is a cluster."""
        if not instances:
            return None
        columns = [k for k, v in instances[0].items() if isinstance(v, bool)]
        n = len(instances)
        return ItemTable(np.arange(n), {k: metric([r[k] for r in instances], np.arange(n)) for k in columns})
