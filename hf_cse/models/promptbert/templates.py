"""PromptBERT's templates at the token level: a template's token ids, a batch of tokenized sentences put into it,
and the template with an empty sentence whose positions stand in for a sentence of a given length (template
denoising).

A template is text with one ``{sentence}`` and at most one ``{mask}`` (the tokenizer's mask token), e.g.
``This sentence of "{sentence}" means{mask}.``. It is tokenized as the authors' ``train.py`` does (``bs`` / ``es``):
the text before ``{sentence}`` with the tokenizer's leading special tokens (``[CLS]``), the sentence's own tokens,
the text after it with the trailing ones (``[SEP]``). Working on token ids (not on text) means that every path that
hands the model tokenized sentences (training, evaluation, the export's check) gets the same template.

Where a template has no ``{mask}`` (decoders only: their tokenizers have no mask token; PromptEOL's ``... means in one
word:"``), the representation is the template's last token.

This file ships with a PromptBERT export beside ``st_pooling.py`` (sentence-transformers' remote code), so it imports
nothing from hf_cse: its refusals are ``ValueError``s, which :mod:`.model` raises again as ``CSEError``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

SENTENCE, MASK = "{sentence}", "{mask}"
#: the last characters after which PromptBERT's authors' ``evaluation.py`` adds no period to a test sentence
SENTENCE_ENDS = ".?\"'"


def ended_with_period(text: str) -> str:
    """``text`` ending with a period where it ends in none of :data:`SENTENCE_ENDS` (trailing whitespace aside;
    a blank text stays as it is), as the authors' ``evaluation.py`` edits each test sentence before templating it."""
    kept = text.rstrip()
    return kept + "." if kept and kept[-1] not in SENTENCE_ENDS else text


def special_tokens_around(tokenizer) -> tuple[list[int], int]:
    """The special tokens the tokenizer puts before a sentence (``[CLS]``, ``<s>``; none for GPT-2) and how many it
    puts after (``[SEP]``, ``</s>``)."""
    core = tokenizer("word", add_special_tokens=False)["input_ids"]
    full = tokenizer("word")["input_ids"]
    for start in range(len(full) - len(core) + 1):
        if full[start:start + len(core)] == core:
            return list(full[:start]), len(full) - start - len(core)
    raise ValueError(f"promptbert: cannot find a sentence's own tokens inside what {type(tokenizer).__name__} makes "
                     "of it; use a tokenizer that adds special tokens only around the sentence.")


@dataclass(frozen=True)
class TemplateIds:
    """A template's token ids: ``prefix`` (leading special tokens included) + sentence + ``suffix`` (trailing ones
    included); ``mask_at``: the index of the representation token inside ``suffix`` (where the template has no
    ``{mask}``: its own last token, before any end-of-sequence token the tokenizer adds)."""

    prefix: tuple[int, ...]
    suffix: tuple[int, ...]
    mask_at: int

    @classmethod
    def build(cls, tokenizer, template: str, name: str = "template", decoder: bool = False) -> "TemplateIds":
        """``name``: the template's argument, for messages; ``decoder``: the model reads a template without
        ``{mask}`` at its last token. An encoder (not ``decoder``) whose tokenizer has a mask token must be told where
        to read (``{mask}``), and a mask token typed in the template would be read nowhere: both are refused."""
        before, after = template.split(SENTENCE)
        if MASK in before:
            raise ValueError(f"promptbert: {name} {template!r} puts {MASK} before {SENTENCE}; put it after "
                             "the sentence, as the paper's templates do.")
        has_mask, mask_token = MASK in after, tokenizer.mask_token
        if has_mask and mask_token is None:
            raise ValueError(f"promptbert: {name} {template!r} has {MASK} but the tokenizer has no mask token "
                             "(a decoder): leave {mask} out, the template's last token then represents the sentence.")
        if mask_token is not None and not decoder:
            own_masks = sum(tokenizer(part, add_special_tokens=False)["input_ids"].count(tokenizer.mask_token_id)
                            for part in (before, after.replace(MASK, "")))
            if own_masks or not has_mask:
                what = (f"holds the mask token {mask_token} typed out" if own_masks else
                        f"has no {MASK}, and the encoder's tokenizer has a mask token ({mask_token})")
                raise ValueError(f"promptbert: {name} {template!r} {what}: write {MASK} (once) where the sentence's "
                                 "representation is read, e.g. "
                                 "'This sentence : \"{sentence}\" means{mask}.'.")
        lead, n_trail = special_tokens_around(tokenizer)
        trail = tokenizer("word")["input_ids"][len(tokenizer("word")["input_ids"]) - n_trail:] if n_trail else []
        prefix = lead + tokenizer(before, add_special_tokens=False)["input_ids"]
        suffix = tokenizer(after.replace(MASK, tokenizer.mask_token or ""), add_special_tokens=False)["input_ids"]
        own_tokens, suffix = len(suffix), suffix + trail
        if has_mask:
            found = [i for i, t in enumerate(suffix) if t == tokenizer.mask_token_id]
            if len(found) != 1:
                raise ValueError(f"promptbert: {name} {template!r} tokenizes with {len(found)} mask tokens "
                                 "after the sentence; it needs exactly one.")
            mask_at = found[0]
        else:
            if not own_tokens:
                raise ValueError(f"promptbert: {name} {template!r} ends with the sentence; without {MASK} its "
                                 "last token represents the sentence, so put words after {sentence}.")
            mask_at = own_tokens - 1  # the template's own last token, before an end-of-sequence token
        return cls(tuple(prefix), tuple(suffix), mask_at)

    def __len__(self) -> int:
        return len(self.prefix) + len(self.suffix)


@dataclass(frozen=True)
class Templated:
    """A batch put into a template: ``input_ids`` / ``attention_mask`` ``(B, L')`` (right-padded), each row's
    ``sentence_length`` (the sentence's own tokens) and ``mask_index`` (where its representation is read)."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    sentence_length: torch.Tensor
    mask_index: torch.Tensor


def put_in_template(input_ids: torch.Tensor, attention_mask: torch.Tensor, ids: TemplateIds, n_lead: int,
                    n_trail: int, pad_id: int, max_length: int | None = None) -> Templated:
    """Rows of tokenized sentences (``n_lead`` special tokens before, ``n_trail`` after the sentence's own tokens;
    left or right padding) put into the template, as the authors' ``train.py`` builds ``bs + s + es``. A sentence is
    cut where the templated row would pass ``max_length`` (the encoder's position limit)."""
    room = None if max_length is None else max(0, max_length - len(ids))
    rows = []
    for row, keep in zip(input_ids.tolist(), attention_mask.bool().tolist()):
        tokens = [t for t, k in zip(row, keep) if k]
        sentence = tokens[n_lead:len(tokens) - n_trail]
        rows.append(sentence if room is None else sentence[:room])
    lengths = [len(s) for s in rows]
    width = len(ids) + max(lengths, default=0)
    out = torch.full((len(rows), width), pad_id, dtype=input_ids.dtype)
    mask = torch.zeros((len(rows), width), dtype=attention_mask.dtype)
    for i, sentence in enumerate(rows):
        full = [*ids.prefix, *sentence, *ids.suffix]
        out[i, :len(full)] = torch.tensor(full, dtype=input_ids.dtype)
        mask[i, :len(full)] = 1
    length = torch.tensor(lengths, dtype=torch.long)
    device = input_ids.device
    return Templated(out.to(device), mask.to(device), length.to(device),
                     (length + len(ids.prefix) + ids.mask_at).to(device))


def empty_template_batch(ids: TemplateIds, lengths: list[int], position_start: int, device) -> tuple[torch.Tensor,
                                                                                                     torch.Tensor]:
    """The template with an empty sentence, one row per sentence length in ``lengths``: ``input_ids (n, T)`` and
    ``position_ids (n, T)`` in which the tokens after the sentence keep the positions they have around a sentence of
    that length (the authors' ``get_delta``: ``position_ids[:, len(bs) + 1:] += length``), counted from
    ``position_start``."""
    row = torch.tensor([*ids.prefix, *ids.suffix], dtype=torch.long, device=device)
    positions = torch.arange(len(row), device=device).unsqueeze(0).repeat(len(lengths), 1) + position_start
    positions[:, len(ids.prefix):] += torch.tensor(lengths, device=device).unsqueeze(-1)
    return row.unsqueeze(0).repeat(len(lengths), 1), positions
