"""DiffCSE's edits of a sentence (DiffCSE, Chuang et al., NAACL 2022, §3 and Table 4) and the collator that makes them.

Each row of the flattened ``(2B, L)`` two-view batch gets its own, independent edit (the authors mask the
2B rows separately). Special tokens ([CLS], [SEP], padding...) are never edited, so position 0 stays [CLS].

Edit operations and their replaced-token-detection (RTD) labels (1 = "replaced", 0 = original):

* ``replace`` (the paper's DiffCSE, default): BERT's MLM recipe -- select each ordinary token with
  probability ``masking_ratio``; of those 80% become [MASK], 10% a random token, 10% stay. The generator fills
  the masked copy; labels are computed by the MODEL after the generator ran: ``label_t = [x''_t != x_t]``,
  0 at position 0 and at padding (authors' code).
* ``insert``: ``round(masking_ratio * n)`` [MASK] tokens (n = ordinary tokens of the row) are inserted at
  distinct random gaps between [CLS] and [SEP]; the generator turns them into real tokens. Label 1 marks
  exactly the inserted tokens (even when the generator happens to write a copy of a neighbour).
* ``delete``: ``round(masking_ratio * n)`` ordinary tokens are deleted; no generator is involved. Label 1 marks
  every token whose immediate predecessor was deleted ("whether a token preceding it has been deleted",
  DiffCSE §5), i.e. the token right after each deleted run -- possibly [SEP].

The paper's Table 4 uses 15% for insert/delete; here the same ``masking_ratio`` sets all three.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import torch

from ...collator_rng import batch_seed
from ...data import TwoViewCollator
from ...errors import CSEError
from ...hyperparameter_rules import check_rule, plain_number
from ...masking import mask_tokens

EDIT_OPERATIONS = ("replace", "insert", "delete")


def _ordinary_positions(row: list[int], special: set[int]) -> list[int]:
    return [i for i, t in enumerate(row) if t not in special]


def insert_masks(row: list[int], special: set[int], mask_id: int, ratio: float, rng: random.Random):
    """One sequence (no padding) with ``round(ratio * n)`` [MASK]s inserted at distinct gaps after [CLS] and up
    to before the final special token. Returns ``(new_ids, labels)`` with label 1 on the inserted tokens."""
    ordinary = _ordinary_positions(row, special)
    if not ordinary:
        return list(row), [0] * len(row)
    first, last = ordinary[0], ordinary[-1] + 1  # gaps: before each ordinary token and after the last one
    gaps = list(range(first, last + 1))
    k = min(round(ratio * len(ordinary)), len(gaps))
    chosen = set(rng.sample(gaps, k))
    ids, labels = [], []
    for i, tok in enumerate(row + [None]):
        if i in chosen:
            ids.append(mask_id)
            labels.append(1)
        if tok is not None:
            ids.append(tok)
            labels.append(0)
    return ids, labels


def delete_tokens(row: list[int], special: set[int], ratio: float, rng: random.Random):
    """One sequence (no padding) with ``round(ratio * n)`` ordinary tokens deleted. Returns ``(new_ids, labels)``
    with label 1 on each token whose immediate predecessor was deleted."""
    ordinary = _ordinary_positions(row, special)
    k = min(round(ratio * len(ordinary)), len(ordinary))
    deleted = set(rng.sample(ordinary, k))
    ids, labels, after_deletion = [], [], False
    for i, tok in enumerate(row):
        if i in deleted:
            after_deletion = True
            continue
        ids.append(tok)
        labels.append(int(after_deletion))
        after_deletion = False
    return ids, labels


def _pad_rows(rows: list[list[int]], value: int) -> torch.Tensor:
    length = max(len(r) for r in rows)
    return torch.tensor([r + [value] * (length - len(r)) for r in rows], dtype=torch.long)


@dataclass
class DiffCSECollator(TwoViewCollator):
    """Two views of each sentence (as :class:`TwoViewCollator`) plus an edited copy of each of the 2B rows.

    Adds ``mlm_input_ids (B, 2, L')``; for ``insert``/``delete`` also ``mlm_attention_mask (B, 2, L')`` and
    ``rtd_labels (B, 2, L')`` (for ``replace`` L' = L, the attention mask is the input's and the labels are
    computed after the generator). ``seed`` makes the edits reproducible: each batch draws from generators
    seeded by ``seed`` and its rows (:func:`hf_cse.collator_rng.batch_seed`), so a batch is edited alike wherever and
    whenever it is collated (a resumed run, a loader worker); None uses torch's / Python's global RNG (seeded by the
    Trainer, each batch's own through :class:`hf_cse.collator_rng.CollatorDraws`).
    """

    masking_ratio: float = 0.30
    edit_operation: str = "replace"
    seed: int | None = None

    def __post_init__(self):
        if self.edit_operation not in EDIT_OPERATIONS:
            raise CSEError(f"Unknown edit_operation {self.edit_operation!r}. Valid: {', '.join(EDIT_OPERATIONS)}.")
        self.masking_ratio = plain_number(self.masking_ratio)
        check_rule("diffcse", "masking_ratio", self.masking_ratio, "edit_share", fields=("masking_ratio",))
        if self.edit_operation != "delete" and self.tokenizer.mask_token_id is None:
            raise CSEError(f"the tokenizer ({type(self.tokenizer).__name__}) has no mask token; DiffCSE's "
                             f"{self.edit_operation!r} edit needs one.")

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        batch = super().__call__(features)
        ids = batch["input_ids"]
        key = None if self.seed is None else batch_seed(self.seed, None, features) >> 1  # manual_seed: < 2**63
        if self.edit_operation == "replace":
            generator = None if key is None else torch.Generator().manual_seed(key)
            batch["mlm_input_ids"] = mask_tokens(ids, self.tokenizer, self.masking_ratio, generator)
            return batch
        n, views, _ = ids.shape
        special = set(self.tokenizer.all_special_ids)
        lengths = batch["attention_mask"].sum(-1).view(-1).tolist()
        rows = [r[:length] for r, length in zip(ids.view(n * views, -1).tolist(), lengths)]
        # torch's global generator (set_seed / the Trainer) gives the batch's seed: one draw per batch
        rng = random.Random(int(torch.randint(2**62, (1,))) if key is None else key)
        if self.edit_operation == "insert":
            edited = [insert_masks(r, special, self.tokenizer.mask_token_id, self.masking_ratio, rng) for r in rows]
        else:
            edited = [delete_tokens(r, special, self.masking_ratio, rng) for r in rows]
        new_ids = _pad_rows([e[0] for e in edited], self.tokenizer.pad_token_id)
        labels = _pad_rows([e[1] for e in edited], 0)
        attention = _pad_rows([[1] * len(e[0]) for e in edited], 0)
        shape = (n, views, new_ids.shape[-1])
        batch.update(mlm_input_ids=new_ids.view(shape), mlm_attention_mask=attention.view(shape),
                     rtd_labels=labels.view(shape))
        return batch
