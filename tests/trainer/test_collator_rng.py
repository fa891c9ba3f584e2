"""Each training batch's random draws come from a seed of its own (hf_cse.collator_rng): the same masks wherever and
whenever the batch is collated, other masks for other rows, epochs and seeds, and the global generators untouched."""

import random
from types import SimpleNamespace

import torch
from helpers import random_sentences
from transformers import AutoTokenizer

from hf_cse.collator_rng import CollatorDraws
from hf_cse.data import TwoViewCollator
from hf_cse.masking import MaskedLMCollator


def _keyed(tok, seed=0, workers=0, persistent=False):
    draws = CollatorDraws()
    args = SimpleNamespace(seed=seed, dataloader_num_workers=workers, dataloader_persistent_workers=persistent)
    return draws, draws.track(MaskedLMCollator(TwoViewCollator(tok), tok, 0.3), args)


def test_a_batch_draws_its_own_masks_and_leaves_the_global_generators_alone(tiny_bert_dir):
    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    features = [tok(s) for s in random_sentences(16)]
    draws, collate = _keyed(tok)
    draws.epoch_begins(0)
    masks = lambda batch: batch["mlm_input_ids"]  # noqa: E731
    torch.manual_seed(1)
    random.seed(1)
    before = torch.get_rng_state(), random.getstate()
    batch = collate(features)
    assert torch.equal(torch.get_rng_state(), before[0]) and random.getstate() == before[1]
    assert not torch.equal(masks(batch), batch["input_ids"])  # it masked
    torch.manual_seed(2)  # another state of the training process's generator: the same masks
    assert torch.equal(masks(collate(features)), masks(batch))
    copy, collate_copy = _keyed(tok)  # another copy of the collator (a worker's)
    copy.epoch_begins(0)
    assert torch.equal(masks(collate_copy(features)), masks(batch))
    assert not torch.equal(masks(collate(features[::-1])), masks(batch).flip(0))  # other rows (in another order)
    other, collate_other = _keyed(tok, seed=1)  # another seed
    other.epoch_begins(0)
    assert not torch.equal(masks(collate_other(features)), masks(batch))
    draws.epoch_begins(1)
    assert not torch.equal(masks(collate(features)), masks(batch))  # the same rows in another epoch
    # persistent workers keep the collator of the epoch they started in: the epoch is not in the key
    draws, collate = _keyed(tok, workers=2, persistent=True)
    draws.epoch_begins(0)
    first = masks(collate(features))
    draws.epoch_begins(1)
    assert torch.equal(masks(collate(features)), first)
