"""Training batch layout: the tensors agree with the contract or the batch is rejected."""
import pytest
import torch

from compclip.trainer.batch import Batch


def make(b=4, p=2, h=8, ctx=16, valid=None):
    return Batch(images=torch.zeros(b + p, 3, 8, 8), texts=torch.zeros(b + p + h, ctx, dtype=torch.long),
                 num_anchors=b, partner_of=torch.arange(p), negative_of=torch.arange(h) % b,
                 text_valid=torch.ones(b + p + h, dtype=torch.bool) if valid is None else valid,
                 keys=[f"k{i}" for i in range(b)])


def test_text_to_image_marks_negatives():
    batch = make().check()
    assert batch.text_to_image.tolist() == [0, 1, 2, 3, 4, 5] + [-1] * 8
    assert (batch.num_anchors, batch.num_partners, batch.num_negatives) == (4, 2, 8)


def test_padding_only_allowed_on_negatives():
    valid = torch.ones(14, dtype=torch.bool)
    valid[-1] = False
    make(valid=valid).check()
    valid[0] = False
    with pytest.raises(ValueError, match="anchor and partner captions must all be valid"):
        make(valid=valid).check()


@pytest.mark.parametrize("change, message", [
    (lambda b: setattr(b, "images", torch.zeros(5, 3, 8, 8)), "images has 5 rows"),
    (lambda b: setattr(b, "texts", torch.zeros(3, 16)), "texts has 3 rows"),
    (lambda b: setattr(b, "partner_of", torch.tensor([0, 9])), "partner_of must index anchors"),
    (lambda b: setattr(b, "keys", ["k0"]), "keys has 1 entries"),
])
def test_inconsistent_batches_are_rejected(change, message):
    batch = make()
    change(batch)
    with pytest.raises(ValueError, match=message):
        batch.check()


def test_source_ids_must_match_the_layout():
    batch = make()
    batch.image_ids, batch.text_ids = torch.zeros(6, dtype=torch.long), torch.zeros(14, dtype=torch.long)
    batch.check()
    batch.image_ids = torch.zeros(4, dtype=torch.long)
    with pytest.raises(ValueError, match="image_ids must have 6 entries"):
        batch.check()


def test_negatives_may_belong_to_partner_images():
    """negative_of indexes images: anchors 0..B-1, and partners B..B+P-1 (negatives.per_partner)."""
    batch = make()
    batch.negative_of = torch.tensor([0, 1, 2, 3, 4, 4, 5, 5])
    batch.check()
    batch.negative_of = torch.tensor([0, 1, 2, 3, 4, 4, 5, 6])
    with pytest.raises(ValueError, match=r"negative_of must index images 0..5"):
        batch.check()
