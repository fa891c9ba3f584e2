"""DiffCSE generators: what turns the masked copy x' of a sentence into the edited sentence x'' = G(x').

Two kinds, one interface (``fill(mlm_input_ids, attention_mask) -> token ids``):

* :class:`MaskedLMGenerator` -- the paper's choice (DiffCSE, Chuang et al., NAACL 2022, §3 and Table 6): a frozen
  pretrained masked LM
  (``distilbert-base-uncased`` for BERT, ``distilroberta-base`` for RoBERTa). Argmax by default as in the
  authors' code (the paper says "sampling"; ``sampling=True`` draws from the softmax instead); dropout on by
  default, as the authors' generator runs (``model.train()`` reaches it; ``train_mode=False``: eval mode).
  ``fill="all"`` takes the generator's token at EVERY position (authors' code), ``"masked"`` only at
  the [MASK] positions (the ELECTRA recipe).
* :class:`UnigramGenerator` -- needs no weights: every [MASK] becomes a token drawn from the corpus unigram
  distribution (or uniformly from the vocabulary). **A departure from the paper**: the replacements are not
  context-aware, so the RTD task is easier than with an MLM; use it to run DiffCSE without a Hub download.

Generators are deliberately NOT ``nn.Module`` sub-modules of the DiffCSE model (``DiffCSEModel.attach_generator``
keeps them in a plain attribute): they stay out of ``model.parameters()`` (so out of the optimizer and of DDP),
out of ``save_pretrained`` checkpoints, and ``from_pretrained`` cannot re-initialise them.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

import numpy as np
import torch
from torch import nn
from transformers.utils import logging as hf_logging

from ...errors import CSEError
from ...tokenizer_match import is_stand_in

logger = logging.getLogger(__name__)

UNIGRAM = "unigram"
GENERATOR_FILLS = ("all", "masked")

# Hub ids of the paper's generators (DiffCSE §4.1 and the authors' README), for messages and presets.
PAPER_GENERATORS = {"bert": "distilbert-base-uncased", "roberta": "distilroberta-base"}


class GeneratorError(CSEError):
    """A generator that cannot be used with this encoder; the message says why and what to do."""


class Generator(Protocol):
    """Anything that fills a masked batch: ``(N, L)`` ids with [MASK]s -> ``(N, L)`` ids of the edited sentences."""

    mask_token_id: int

    def fill(self, mlm_input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor: ...


class MaskedLMGenerator:
    """A frozen ``AutoModelForMaskedLM`` used as DiffCSE's generator (never trained, never saved with the model)."""

    def __init__(
        self,
        model: nn.Module,
        mask_token_id: int,
        sampling: bool = False,
        train_mode: bool = True,
        fill: str = "all",
        name: str | None = None,
    ):
        if fill not in GENERATOR_FILLS:
            raise GeneratorError(f"generator fill must be one of {GENERATOR_FILLS}, got {fill!r}.")
        self.model = model.requires_grad_(False)
        self.mask_token_id = int(mask_token_id)
        self.sampling = sampling
        self.train_mode = train_mode
        self.fill_positions = fill
        self.name = name or getattr(getattr(model, "config", None), "name_or_path", type(model).__name__)

    @property
    def vocab_size(self) -> int:
        return int(self.model.get_output_embeddings().weight.shape[0])

    @torch.no_grad()
    def fill(self, mlm_input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        device = mlm_input_ids.device
        if next(self.model.parameters()).device != device:  # the trainer moves the DiffCSE model, not this one
            self.model.to(device)
        self.model.train(self.train_mode)
        logits = self.model(input_ids=mlm_input_ids, attention_mask=attention_mask).logits
        if self.sampling:
            probs = torch.softmax(logits.float(), dim=-1)
            pred = torch.multinomial(probs.view(-1, probs.shape[-1]), 1).view(mlm_input_ids.shape)
        else:
            pred = logits.argmax(dim=-1)
        if self.fill_positions == "masked":
            pred = torch.where(mlm_input_ids == self.mask_token_id, pred, mlm_input_ids)
        return pred

    def __repr__(self) -> str:
        return (f"MaskedLMGenerator({self.name!r}, sampling={self.sampling}, train_mode={self.train_mode}, "
                f"fill={self.fill_positions!r})")


class UnigramGenerator:
    """Replaces every [MASK] by a token drawn from ``probs`` (the corpus unigram distribution, specials excluded).

    Departure from the paper (no MLM weights needed): see the module docstring. Only [MASK] positions change;
    the 10% random / 10% kept tokens of the 80/10/10 recipe stay as the collator made them.
    """

    name = UNIGRAM

    def __init__(self, probs: torch.Tensor, mask_token_id: int):
        probs = torch.as_tensor(probs, dtype=torch.float64)
        if probs.dim() != 1 or probs.numel() == 0 or not torch.isfinite(probs).all() or (probs < 0).any():
            raise GeneratorError("unigram probabilities must be a 1-D vector of finite non-negative numbers.")
        if probs.sum() <= 0:
            raise GeneratorError("unigram probabilities sum to 0: the corpus has no non-special tokens.")
        self.probs = (probs / probs.sum()).float()
        self.mask_token_id = int(mask_token_id)

    @property
    def vocab_size(self) -> int:
        return self.probs.numel()

    @classmethod
    def from_token_ids(
        cls, sequences: Iterable[Iterable[int]] | None, vocab_size: int, mask_token_id: int, special_ids: Iterable[int]
    ) -> "UnigramGenerator":
        """Counts of the token ids in ``sequences`` (e.g. ``tokenized_dataset["input_ids"]``); uniform over the
        non-special vocabulary when ``sequences`` is None or empty."""
        counts = torch.zeros(vocab_size, dtype=torch.float64)
        if sequences is not None:
            flat = np.fromiter(itertools.chain.from_iterable(sequences), dtype=np.int64)  # fast for 1M sentences
            if flat.size and (flat.min() < 0 or flat.max() >= vocab_size):
                raise GeneratorError(f"token ids span [{flat.min()}, {flat.max()}], outside the vocabulary of size "
                                     f"{vocab_size}: the training set was tokenized with another tokenizer.")
            counts += torch.from_numpy(np.bincount(flat, minlength=vocab_size).astype(np.float64))
        special = torch.tensor(sorted({int(i) for i in special_ids if i is not None and 0 <= int(i) < vocab_size}),
                               dtype=torch.long)
        counts[special] = 0
        if counts.sum() == 0:  # no corpus: uniform over the ordinary tokens
            counts.fill_(1.0)
            counts[special] = 0
        return cls(counts, mask_token_id)

    @torch.no_grad()
    def fill(self, mlm_input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        masked = mlm_input_ids == self.mask_token_id
        n = int(masked.sum())
        if n == 0:
            return mlm_input_ids.clone()
        draws = torch.multinomial(self.probs, n, replacement=True).to(mlm_input_ids.device)
        out = mlm_input_ids.clone()
        out[masked] = draws
        return out

    def __repr__(self) -> str:
        return f"UnigramGenerator(vocab_size={self.vocab_size})"


def _tokenizer_vocab(tokenizer) -> dict[str, int]:
    return dict(tokenizer.get_vocab())


def check_generator_vocab(generator_vocab_size: int, encoder_vocab_size: int, name: str) -> None:
    # The generator reads and writes the ENCODER tokenizer's ids (the authors share one vocabulary).
    if generator_vocab_size != encoder_vocab_size:
        raise GeneratorError(
            f"generator {name!r} has a vocabulary of {generator_vocab_size} tokens but the encoder has "
            f"{encoder_vocab_size}: DiffCSE's generator must use the encoder's tokenizer. Pick a masked LM of the "
            f"same family (e.g. {PAPER_GENERATORS['bert']} for BERT/MiniLM, {PAPER_GENERATORS['roberta']} for "
            "RoBERTa), or generator_name_or_path unigram."
        )


def check_same_tokenizer(generator_tokenizer, encoder_tokenizer, name: str) -> None:
    gen_vocab, enc_vocab = _tokenizer_vocab(generator_tokenizer), _tokenizer_vocab(encoder_tokenizer)
    if gen_vocab != enc_vocab:
        differing = sorted(set(gen_vocab.items()) ^ set(enc_vocab.items()), key=lambda kv: kv[1])[:5]
        raise GeneratorError(
            f"generator {name!r} uses a different tokenizer than the encoder (e.g. token/id pairs {differing} differ): "
            "the generator must read and write the encoder's token ids. Pick a masked LM with the encoder's "
            "vocabulary, or generator_name_or_path unigram."
        )


def check_all_weights_loaded(model: nn.Module, loading_info: dict, name: str) -> None:
    """Refuse a masked LM whose checkpoint lacks weights (e.g. a plain ``BertModel`` folder has no masked-LM
    head): transformers would initialise them at random and the frozen generator would emit noise."""
    missing = sorted(loading_info.get("missing_keys") or [])
    mismatched = sorted(str(k[0] if isinstance(k, tuple) else k) for k in loading_info.get("mismatched_keys") or [])
    if not missing and not mismatched:
        return
    prefix = getattr(model, "base_model_prefix", "") + "."
    head_missing = [k for k in missing if not k.startswith(prefix)]
    what = "has no masked-LM head weights" if head_missing else "lacks weights"
    keys = (head_missing or missing or mismatched)[:3]
    raise GeneratorError(
        f"generator {name!r} {what} ({len(missing)} missing, {len(mismatched)} of another shape, e.g. {keys}): "
        "they would be randomly initialised and the frozen generator would fill masks with noise. Give a masked-LM "
        f"checkpoint (e.g. {PAPER_GENERATORS['bert']}), or generator_name_or_path unigram."
    )


def load_generator(
    name_or_path: str | nn.Module,
    tokenizer,
    encoder_vocab_size: int | None = None,
    train_token_ids: Iterable[Iterable[int]] | None = None,
    sampling: bool = False,
    train_mode: bool = True,
    fill: str = "all",
    trust_remote_code: bool = False,
) -> MaskedLMGenerator | UnigramGenerator:
    """A generator for an encoder whose tokenizer is ``tokenizer``.

    ``name_or_path``: ``"unigram"`` (no weights; ``train_token_ids`` gives the corpus counts, else uniform), a
    masked-LM folder or Hub id (loaded with ``AutoModelForMaskedLM``; its tokenizer must equal the encoder's), or
    an already built masked-LM module. ``encoder_vocab_size`` defaults to ``len(tokenizer)``. ``trust_remote_code``
    lets a masked LM whose code ships with its checkpoint run that code (off by default).
    """
    if tokenizer.mask_token_id is None:
        raise GeneratorError(f"the encoder's tokenizer ({type(tokenizer).__name__}) has no mask token; DiffCSE "
                             "masks tokens before the generator fills them.")
    vocab_size = int(encoder_vocab_size or len(tokenizer))
    if isinstance(name_or_path, str) and name_or_path == UNIGRAM:
        if len(tokenizer) > vocab_size:
            raise GeneratorError(f"the tokenizer has {len(tokenizer)} tokens, more than the encoder's {vocab_size}.")
        return UnigramGenerator.from_token_ids(train_token_ids, vocab_size, tokenizer.mask_token_id,
                                               tokenizer.all_special_ids)
    if isinstance(name_or_path, nn.Module):
        model, name = name_or_path, getattr(getattr(name_or_path, "config", None), "name_or_path", "module")
    else:
        from transformers import AutoModelForMaskedLM, AutoTokenizer

        name = str(name_or_path)
        verbosity = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()  # missing weights are refused below with one line, not a load report
        try:
            model, loading_info = AutoModelForMaskedLM.from_pretrained(name, output_loading_info=True,
                                                                       trust_remote_code=trust_remote_code)
        except OSError as err:
            local = Path(name).is_dir()
            raise GeneratorError(
                f"could not load the generator {name!r} as a masked LM ({err}). "
                + ("" if local else "Without network access to the Hugging Face Hub use a local folder, or ")
                + "use generator_name_or_path unigram (no weights; a departure from the paper)."
            ) from err
        finally:
            hf_logging.set_verbosity(verbosity)
        check_all_weights_loaded(model, loading_info, name)
        try:
            gen_tokenizer = AutoTokenizer.from_pretrained(name, trust_remote_code=trust_remote_code)
        except (OSError, ValueError):
            gen_tokenizer = None
        if gen_tokenizer is not None and not is_stand_in(gen_tokenizer):
            check_same_tokenizer(gen_tokenizer, tokenizer, name)
        else:  # no tokenizer files beside the generator (what transformers stands in for them is no reference)
            logger.warning("generator %s has no tokenizer to compare with the encoder's; checking vocab size", name)
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is None or not hasattr(model, "config"):
        raise GeneratorError(f"generator {name!r} is not a masked LM (no output embeddings / config).")
    check_generator_vocab(int(head.weight.shape[0]), vocab_size, name)
    model.eval()
    return MaskedLMGenerator(model, tokenizer.mask_token_id, sampling=sampling, train_mode=train_mode, fill=fill,
                             name=name)
