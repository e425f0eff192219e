"""One optimiser step of `trainer.train.Trainer` on a fixed global batch (tests only).

`python tests/_one_step.py OUT RECIPE [key=value ...]`, plainly (1 process: the whole global
batch) or under `accelerate launch` (N processes: rank r takes the r-th of N equal slices).
The global batch is N_SLICES=2 slices of [4 anchors | 2 partners | 4 hard negatives, one of them
padding]; 1 process reads it as the slices concatenated, in rank order, as the loss's gather
does. Rank 0 saves {"loss", "before", "after"} (full state dicts) to OUT.
"""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from compclip.trainer import train  # noqa: E402
from compclip.trainer.batch import Batch  # noqa: E402
from compclip.trainer.data import resolve_sources  # noqa: E402
from compclip.trainer.loss import Layout  # noqa: E402
from compclip.trainer.recipe import load_recipe  # noqa: E402

N_SLICES = 2
COLOURS = ["red", "green", "blue", "yellow", "white", "black"]


def make_slice(r: int, size: int, tokenizer) -> Batch:
    g = torch.Generator().manual_seed(100 + r)
    caption = lambda a, b: f"a {COLOURS[a % 6]} square left of a {COLOURS[b % 6]} square"  # noqa: E731
    anchors = [caption(r + i, r + 2 * i + 1) for i in range(4)]
    partners = [caption(r + 2 * i + 1, r + i) for i in (0, 2)]
    negatives = [caption(r + i + 3, r + 2 * i + 1) for i in range(4)]
    return Batch(images=torch.randn(6, 3, size, size, generator=g),
                 texts=tokenizer(anchors + partners + negatives),
                 num_anchors=4, partner_of=torch.tensor([0, 2]), negative_of=torch.tensor([0, 1, 2, 3]),
                 text_valid=torch.tensor([True] * 9 + [False]),
                 keys=[f"r{r}a{i}" for i in range(4)]).check()


def main(out: str, recipe_path: str, *overrides: str) -> None:
    recipe = load_recipe(recipe_path, list(overrides))
    trainer = train.Trainer(recipe, resolve_sources(recipe.data.train_shards))
    acc, model = trainer.acc, trainer.acc.unwrap_model(trainer.model)
    size = model.visual.image_size
    size = size[0] if isinstance(size, (tuple, list)) else size
    slices = [make_slice(r, size, trainer.loaded.tokenizer) for r in range(N_SLICES)]
    if acc.num_processes == N_SLICES:
        batch = slices[acc.process_index]
    else:
        assert acc.num_processes == 1, acc.num_processes
        partners = recipe.loss.partners_as_positives
        merged = Layout.cat([Layout.from_batch(s, partners) for s in slices])
        batch = Batch(torch.cat([s.images for s in slices]), torch.cat([s.texts for s in slices]), 8,
                      torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long),
                      merged.text_valid, []).to(acc.device)  # only images/texts are used: the layout is patched
        original = Layout.from_batch
        Layout.from_batch = classmethod(
            lambda cls, b, p=True: merged if b is batch else original(b, p))
    before = {k: v.detach().clone() for k, v in model.state_dict().items()}
    loss = trainer.step([batch.to(acc.device) if acc.num_processes > 1 else batch])
    after = {k: v.detach().cpu().clone() for k, v in acc.unwrap_model(trainer.model).state_dict().items()}
    if acc.is_main_process:
        torch.save({"loss": loss, "before": before, "after": after}, out)
    acc.wait_for_everyone()
    acc.end_training()


if __name__ == "__main__":
    main(*sys.argv[1:])
