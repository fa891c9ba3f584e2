"""ESimCSE's word repetition (Wu et al., COLING 2022, §3.1): the positive view of a sentence repeats a few of its
tokens in place, so that the two views of a positive pair differ in length as well as in dropout.

Two draw rules, both on the tokenized sentence (subword tokens, the authors' ``--dup_type bpe``):

* ``"code"`` (default; what produced the paper's numbers -- the authors' ``train.py:prepare_features``, branch
  ``dup_type == "bpe"``, run by ``run.sh``): for the ``L`` token ids of the sentence *with* its special tokens,
  nothing is repeated when ``int(dup_rate * L) == 0``; otherwise ``dup_len = randrange(min(10, int(dup_rate *
  L)))`` (so at most 9 tokens, and one fewer than ``int(dup_rate * L)``) and the repeated positions are
  ``sample(range(1, L - 1), dup_len)`` -- every position but the first and the last ([CLS] and [SEP]).
* ``"paper"`` (§3.1's formula): ``dup_len`` uniform in ``[0, max(2, int(dup_rate * n))]`` (capped at ``n``) for the
  ``n`` ordinary (non-special) tokens, the positions a uniform sample of those tokens.

The draws are made with Python's ``random`` as the authors' are (``randrange`` then ``sample``), so that
:func:`repeat_tokens` given a ``random.Random`` in a given state repeats exactly the tokens the authors' code would.
Where the draws come from differs (kept on purpose): the authors draw once per training row, in data-set order,
from the global stream seeded by ``seed`` (preprocessing); :class:`WordRepetitionCollator` draws each row from a
generator seeded by (seed, the row's token ids). Each sentence keeps one repeated view for the whole run, as in
the authors' code, and the views do not depend on the batch order, the number of processes or loader workers, or
on where a run was resumed (the loader collates one batch ahead of the checkpoint, so a shared stream would not
resume to the same views).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Literal

import torch

from ...data import TwoViewCollator
from ...errors import CSEError

#: how many tokens are repeated and where: the authors' code (default) or the paper's §3.1 formula
DupRule = Literal["code", "paper"]
#: the authors' cap on the number of repeated tokens (``min(10, ...)`` in ``randrange``: at most 9)
CODE_MAX_REPEATS = 10


def repeated_positions(ids: list[int], dup_rate: float, rng: random.Random, rule: DupRule = "code",
                       special: list[int] | None = None) -> list[int]:
    """The positions of ``ids`` whose token is repeated, sorted, drawn from ``rng`` as the ``rule`` says (module
    docstring). ``special``: the special-tokens mask of ``ids`` (1 = special), needed by the ``"paper"`` rule."""
    if rule == "code":
        most = int(dup_rate * len(ids))
        if most <= 0:
            return []
        dup_len = rng.randrange(min(CODE_MAX_REPEATS, most))
        return sorted(rng.sample(range(1, len(ids) - 1), dup_len))
    ordinary = [i for i, s in enumerate(special if special is not None else [0] * len(ids)) if not s]
    dup_len = rng.randint(0, min(len(ordinary), max(2, int(dup_rate * len(ordinary)))))
    return sorted(rng.sample(ordinary, dup_len))


def repeat_at(values: list, positions: list[int]) -> list:
    """``values`` with the entry at each of ``positions`` written twice, in place (the repeated view)."""
    chosen = set(positions)
    return [v for i, value in enumerate(values) for v in ((value, value) if i in chosen else (value,))]


def repeat_tokens(ids: list[int], dup_rate: float, rng: random.Random, rule: DupRule = "code",
                  special: list[int] | None = None) -> list[int]:
    """The repeated view of the token ids ``ids`` (:func:`repeated_positions`, then :func:`repeat_at`)."""
    return repeat_at(ids, repeated_positions(ids, dup_rate, rng, rule, special))


@dataclass
class WordRepetitionCollator(TwoViewCollator):
    """View 1: the sentence; view 2: the sentence with a few tokens repeated (:func:`repeat_tokens`). Both views are
    padded together: ``input_ids (B, 2, L)``; ``token_type_ids`` and ``attention_mask`` are repeated at the same
    positions. ``seed``: with the row's token ids, seeds the row's draws (None = ``torch.initial_seed()`` when the
    collator is built, i.e. the run's ``seed``). ``max_length``: the encoder's position limit
    (:meth:`ESimCSEModel.collator <hf_cse.models.esimcse.ESimCSEModel.collator>` gives it). A repeated view longer
    than it or than the tokenizer's ``model_max_length`` is cut to the shorter, keeping its last token ([SEP]) as the
    tokenizer's truncation does (the authors' length 32 never gets there); a view within both is never touched."""

    dup_rate: float = 0.32
    rule: DupRule = "code"
    seed: int | None = None
    max_length: int | None = None
    #: the model's ``prompt`` (``CSEConfig.prompt``), tokenized in front of every sentence: no part of the sentence,
    #: so never repeated nor counted in its length
    prompt: str | None = None

    def __post_init__(self):
        super().__post_init__()
        if self.seed is None:
            self.seed = torch.initial_seed()
        limit = getattr(self.tokenizer, "model_max_length", None)
        # a tokenizer built from a vocab file has no real model_max_length (a huge placeholder): the encoder's
        # limit alone then keeps a sentence tokenized at that limit from growing past it
        limits = [n for n in (limit if isinstance(limit, int) and limit < 1_000_000 else None, self.max_length)
                  if n is not None]
        self._max_length = min(limits) if limits else None
        self._prompt_ids: list[int] = []
        if self.prompt and self.prompt.strip():
            # a prompt's trailing space belongs to the sentence's first token (BPE: "Ġthe"): left out here
            self._prompt_ids = self.tokenizer(self.prompt.rstrip(), add_special_tokens=False)["input_ids"]
            sample = self.tokenizer(self.prompt + "a sentence")["input_ids"]
            if self._prompt_start(sample) is None:
                raise CSEError(f"esimcse: the tokenizer splits the prompt {self.prompt!r} differently in front of a "
                               "sentence than alone, so its tokens cannot be kept out of the repeated ones; train "
                               "without prompt, or end the prompt with a word boundary (': ').")

    def _prompt_start(self, ids: list[int]) -> int | None:
        """Where the prompt's tokens start in a row's ids (after its leading special token, if any); None: not
        there."""
        n = len(self._prompt_ids)
        return next((start for start in (0, 1) if ids[start:start + n] == self._prompt_ids), None)

    def row_rng(self, ids: list[int]) -> random.Random:
        """The generator of one row's draws: the same for the same sentence and seed, wherever it is collated."""
        return random.Random(f"{self.seed}/{','.join(map(str, ids))}")

    def repeated(self, feature: dict[str, Any]) -> dict[str, list[int]]:
        """A row's repeated view, drawn over the sentence's own tokens with its special tokens: padding (a data set
        tokenized with it) and the prompt's tokens are no part of it, so never repeated nor counted."""
        mask = feature.get("attention_mask")
        real = [i for i, m in enumerate(mask) if m] if mask is not None else range(len(feature["input_ids"]))
        row = {k: [feature[k][i] for i in real] for k in ("input_ids", "attention_mask", "token_type_ids")
               if k in feature}
        ids = row["input_ids"]
        start = self._prompt_start(ids) if self._prompt_ids else None
        skip = len(self._prompt_ids) if start is not None else 0
        drawn = ids[:start] + ids[start + skip:] if skip else ids
        special = (self.tokenizer.get_special_tokens_mask(drawn, already_has_special_tokens=True)
                   if self.rule == "paper" else None)
        positions = [p + skip if skip and p >= start else p
                     for p in repeated_positions(drawn, self.dup_rate, self.row_rng(ids), self.rule, special)]
        row = {k: repeat_at(v, positions) for k, v in row.items()}
        row.setdefault("attention_mask", [1] * len(row["input_ids"]))
        if self._max_length is not None and len(row["input_ids"]) > self._max_length:
            row = {k: v[: self._max_length - 1] + v[-1:] for k, v in row.items()}
        return row

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        rows = [row for f in features for row in (f, self.repeated(f))]
        batch = self.pad(rows)
        return {k: v.view(len(features), 2, -1) for k, v in batch.items()}
