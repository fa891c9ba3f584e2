"""Whether a training set its caller tokenized was tokenized by the trainer's tokenizer (``processing_class``).

Ids of another tokenizer that fit the encoder's vocabulary (a small vocabulary given to a large model, or the same
size in another order) pass the range check of :mod:`hf_cse.data_checks`, and the run trains silently on other
tokens' embeddings. A few first rows (:data:`ROWS_CHECKED`) are compared, which costs milliseconds at any size:

* where a row still holds its text (the ``text`` column beside ``input_ids``; pair rows: each view's), the text is
  tokenized again as the row was cut (at the row's own length: the caller's ``max_seq_length`` is not known) and
  the ids must be the same, the model's ``prompt`` in front or not, special tokens added or not;
* without text, the first id of each row (padding and its side left out) must be the special token the tokenizer
  starts every sentence with (``[CLS]``, ``<s>``). A tokenizer that adds none (GPT-2) gives nothing to compare.

The trainer's own tokenizing is not checked again (:func:`hf_cse.trainer_options.prepare_run`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import islice

from .data import PAIR_COLUMNS, PAIR_VIEWS
from .data_checks import TOKENIZE, TOKENIZE_PAIRS
from .files import DataError

#: the first rows compared with the tokenizer: a set tokenized apart is so in every row
ROWS_CHECKED = 8
#: the ids a message shows of a row (more: ", ...")
IDS_SHOWN = 6


def first_rows(dataset, count: int = ROWS_CHECKED) -> list[dict]:
    """The first ``count`` rows of a ``datasets`` data set or stream or a list of rows, as dicts of Python values;
    [] for other data (a torch data set: reading it may have effects)."""
    import datasets

    if isinstance(dataset, datasets.Dataset):
        rows = dataset.with_format(None).select(range(min(count, len(dataset))))
    elif isinstance(dataset, datasets.IterableDataset) or (isinstance(dataset, Sequence)
                                                            and not isinstance(dataset, (str, bytes))):
        rows = islice(dataset, count)
    else:
        return []
    return [{k: v.tolist() if hasattr(v, "tolist") else v for k, v in row.items()} for row in rows
            if isinstance(row, Mapping)]


def _unpadded(ids: list, mask, pad_id) -> list[list[int]]:
    """The forms a row's ids may have had before padding: the positions its attention mask keeps, else the row as
    it is and without ``pad_id`` at either end (either padding side; the pad id may be a real token, GPT-2's end)."""
    if isinstance(mask, list) and len(mask) == len(ids):
        return [[i for i, keep in zip(ids, mask) if keep]]
    forms = [ids]
    if pad_id is not None:
        start, end = 0, len(ids)
        while start < end and ids[start] == pad_id:
            start += 1
        while end > start and ids[end - 1] == pad_id:
            end -= 1
        forms.append(ids[start:end])
    return forms


def _tokenized_alike(tokenizer, text: str, forms: list[list[int]], prompts: tuple[str, ...]) -> bool:
    """Whether one of ``forms`` is what ``tokenizer`` makes of ``text`` cut at that form's length (a prompt of
    ``prompts`` in front; special tokens added or not)."""
    special = tokenizer.num_special_tokens_to_add()
    for ids in filter(None, forms):
        for prompt in prompts:
            for add_special in (True, False):
                # a row no longer than the special tokens was not cut (the tokenizer refuses such a length): whole
                cut = len(ids) > special or not add_special
                if tokenizer(prompt + text, truncation=cut, max_length=len(ids) if cut else None,
                             add_special_tokens=add_special)["input_ids"] == ids:
                    return True
    return False


def _shown(ids: list[int], other: list[int]) -> str:
    """``ids``'s first ones for a message: up to the first that differs from ``other``'s, at least a few."""
    differs = next((n for n, (a, b) in enumerate(zip(ids, other)) if a != b), min(len(ids), len(other)))
    shown = max(4, min(differs + 1, IDS_SHOWN))
    return "[" + ", ".join(map(str, ids[:shown])) + (", ...]" if len(ids) > shown else "]")


def _leading_id(tokenizer) -> int | None:
    """The special token id the tokenizer starts every sentence with; None where it adds none before it."""
    from .models.promptbert.templates import special_tokens_around

    try:
        lead, _ = special_tokens_around(tokenizer)
    except (ValueError, TypeError, AttributeError):  # a tokenizer whose special tokens do not frame the sentence
        return None
    return lead[0] if lead else None


def check_rows_tokenizer(dataset, tokenizer, prompt: str | None = None) -> None:
    """Refuse, in one line naming a row's ids and this tokenizer's, a training set whose first rows were not
    tokenized by ``tokenizer`` (``prompt``: the model's, which the trainer and :func:`hf_cse.data.tokenize_dataset`
    put in front of each sentence). See the module's text for what is compared."""
    rows = first_rows(dataset)
    if not rows or not hasattr(tokenizer, "num_special_tokens_to_add"):
        return
    pairs = any(f"{PAIR_VIEWS[1]}input_ids" in row for row in rows)
    tokenize_again = (f"Tokenize the sentences with {TOKENIZE_PAIRS if pairs else TOKENIZE}(dataset, tokenizer), "
                      "tokenizer being processing_class")  # the fix of both refusals, opening a sentence
    prompts = ("", prompt) if prompt else ("",)
    lead = _leading_id(tokenizer)
    token_columns = [c for c in rows[0] if c.endswith(("input_ids", "attention_mask", "token_type_ids"))]
    for n, row in enumerate(rows):
        for prefix, column in zip(PAIR_VIEWS, PAIR_COLUMNS):
            ids = row.get(f"{prefix}input_ids")
            if not isinstance(ids, list) or not ids or not all(isinstance(i, int) for i in ids):
                continue  # no such view, or ids the other checks refuse
            forms = _unpadded(ids, row.get(f"{prefix}attention_mask"), tokenizer.pad_token_id)
            if not forms[-1]:
                continue  # padding alone
            text = row.get(column)
            if isinstance(text, str):
                if not _tokenized_alike(tokenizer, text, forms, prompts):
                    # as the trainer would tokenize it (the prompt in front), cut where the row is
                    mine = tokenizer(prompts[-1] + text, truncation=True,
                                     max_length=max(len(forms[-1]), tokenizer.num_special_tokens_to_add() + 1))
                    mine = mine["input_ids"]
                    raise DataError(
                        f"the training set was tokenized with another tokenizer than processing_class: row {n}'s "
                        f"{prefix}input_ids start {_shown(forms[-1], mine)} where processing_class gives "
                        f"{_shown(mine, forms[-1])} for its {column!r} column, so the encoder would train on other "
                        f"tokens' embeddings. {tokenize_again}, or pass the text alone "
                        f"(dataset.remove_columns({token_columns!r})) for the trainer to tokenize it.")
                continue
            if lead is not None and not any(form and form[0] == lead for form in forms):
                token = tokenizer.convert_ids_to_tokens(lead)
                raise DataError(
                    f"the training set was tokenized with another tokenizer than processing_class, or without its "
                    f"special tokens: row {n}'s {prefix}input_ids start {_shown(forms[-1], [lead])} where "
                    f"processing_class starts every sentence with {token} (id {lead}), so the encoder would train on "
                    f"other tokens' embeddings. {tokenize_again}, or give the sentences as a text "
                    f"column for the trainer to tokenize.")
