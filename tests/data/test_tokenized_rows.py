"""A training set tokenized apart is compared with the trainer's tokenizer (hf_cse.tokenized_rows): ids of another
tokenizer that fit the encoder's vocabulary trained and saved silently on other tokens' embeddings; now its first
rows are tokenized again from their text, or (no text) their first id is compared with the tokenizer's [CLS] / <s>,
and a mismatch is refused in one line when the trainer is built. Data of the trainer's own tokenizer, in whatever
form it was cut, padded or prompted, is taken."""

from __future__ import annotations

import datasets
import pytest
from helpers import random_sentences, tiny_args
from tiny_models import bert_layout_tokenizer, make_tiny_bpe_roberta, save_weights_only, tiny_tokenizer, write_vocab
from tokenizers import processors
from transformers import AutoTokenizer, BertTokenizerFast

from hf_cse.data import tokenize_dataset, tokenize_pair_dataset
from hf_cse.files import DataError
from hf_cse.models import SimCSEModel
from hf_cse.tokenized_rows import check_rows_tokenizer
from hf_cse.trainer import ContrastiveTrainer


@pytest.fixture(scope="module")
def bert_layout_dir(tmp_path_factory):
    """An encoder whose tokenizer has bert-base's layout ([CLS] 101, as MiniLM's): the tiny vocab's ids fit it."""
    folder = tmp_path_factory.mktemp("bert_layout")
    tok = bert_layout_tokenizer(folder)
    save_weights_only(folder, tok)
    tok.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def bpe_roberta_dir(tmp_path_factory):
    return make_tiny_bpe_roberta(tmp_path_factory.mktemp("bpe_roberta"))


def no_bos_tokenizer(folder) -> BertTokenizerFast:
    """The tiny vocab ending each sentence with [SEP] and starting it with nothing (as GPT-2 / T5 add no [CLS])."""
    tok = tiny_tokenizer(folder)
    tok.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single="$A [SEP]", pair="$A [SEP] $B:1 [SEP]:1", special_tokens=[("[SEP]", tok.sep_token_id)])
    assert tok("the cat")["input_ids"][0] != tok.cls_token_id
    return tok


def reordered_tokenizer(folder) -> BertTokenizerFast:
    """The tiny vocab's words in another order, its special tokens at their ids: only the text tells them apart."""
    tokens = write_vocab(folder).read_text().split()
    return BertTokenizerFast(vocab={t: i for i, t in enumerate(tokens[:5] + tokens[5:][::-1])}, do_lower_case=True)


def sentences(n: int = 16) -> datasets.Dataset:
    return datasets.Dataset.from_dict({"text": random_sentences(n)})


def build(encoder_dir, data, tmp_path) -> ContrastiveTrainer:
    return ContrastiveTrainer(model=SimCSEModel.from_encoder(str(encoder_dir)), args=tiny_args(tmp_path / "out"),
                              train_dataset=data, processing_class=AutoTokenizer.from_pretrained(encoder_dir))


def refused(check, *args) -> str:
    with pytest.raises(DataError) as err:
        check(*args)
    message = str(err.value)
    assert "\n" not in message and "--" not in message  # one line, in the library's terms
    return message


def shown(ids: list[int], count: int = 4) -> str:
    return "[" + ", ".join(map(str, ids[:count])) + (", ...]" if len(ids) > count else "]")


@pytest.mark.parametrize("keep_text", [True, False], ids=["with_text", "without_text"])
def test_rows_of_another_tokenizer_whose_ids_fit_are_refused_when_the_trainer_is_built(keep_text, bert_layout_dir,
                                                                                      tiny_bert_dir, tmp_path):
    """The review's case: data of a small vocabulary ([CLS] 2) given to an encoder of a larger one ([CLS] 101)."""
    data = tokenize_dataset(sentences(), AutoTokenizer.from_pretrained(tiny_bert_dir), keep_text=keep_text)
    own = AutoTokenizer.from_pretrained(bert_layout_dir)
    assert max(max(ids) for ids in data["input_ids"]) < len(own)  # every id fits: the range check passes it
    first = data[0]["input_ids"]
    message = refused(build, bert_layout_dir, data, tmp_path)
    if keep_text:
        assert message == (
            f"the training set was tokenized with another tokenizer than processing_class: row 0's input_ids start "
            f"{shown(first)} where processing_class gives {shown(own(data[0]['text'])['input_ids'])} for its 'text' "
            "column, so the encoder would train on other tokens' embeddings. Tokenize the sentences with "
            "hf_cse.data.tokenize_dataset(dataset, tokenizer), tokenizer being processing_class, or pass the text "
            "alone (dataset.remove_columns(['input_ids', 'token_type_ids', 'attention_mask'])) for the trainer to "
            "tokenize it.")
    else:
        assert message == (
            f"the training set was tokenized with another tokenizer than processing_class, or without its special "
            f"tokens: row 0's input_ids start {shown(first)} where processing_class starts every sentence with "
            "[CLS] (id 101), so the encoder would train on other tokens' embeddings. Tokenize the sentences with "
            "hf_cse.data.tokenize_dataset(dataset, tokenizer), tokenizer being processing_class, or give the "
            "sentences as a text column for the trainer to tokenize.")


@pytest.mark.parametrize("keep_text", [True, False], ids=["with_text", "without_text"])
def test_bert_rows_given_to_roberta_are_refused(keep_text, bpe_roberta_dir, tiny_bert_dir):
    data = tokenize_dataset(sentences(), AutoTokenizer.from_pretrained(tiny_bert_dir), keep_text=keep_text)
    roberta = AutoTokenizer.from_pretrained(bpe_roberta_dir)
    assert max(max(ids) for ids in data["input_ids"]) < len(roberta)
    message = refused(check_rows_tokenizer, data, roberta)
    assert message.startswith(f"the training set was tokenized with another tokenizer than processing_class"
                              f"{'' if keep_text else ', or without its special tokens'}: row 0's input_ids start "
                              f"[2, ")
    assert ("for its 'text' column" if keep_text else "starts every sentence with <s> (id 0)") in message


def test_another_tokenizers_pair_rows_are_refused_naming_the_pair_tokenizing(bert_layout_dir, tiny_bert_dir):
    rows = datasets.Dataset.from_dict({"text": random_sentences(8), "positive": random_sentences(8, seed=1)})
    data = tokenize_pair_dataset(rows, AutoTokenizer.from_pretrained(tiny_bert_dir))
    message = refused(check_rows_tokenizer, data, AutoTokenizer.from_pretrained(bert_layout_dir))
    assert "row 0's input_ids start [2, " in message and "hf_cse.data.tokenize_pair_dataset(dataset" in message


@pytest.mark.parametrize("form", ["stream", "list_of_rows"])
def test_data_not_read_ahead_has_its_first_rows_compared(form, bert_layout_dir, tiny_bert_dir):
    data = tokenize_dataset(sentences(), AutoTokenizer.from_pretrained(tiny_bert_dir), keep_text=True)
    data = data.to_iterable_dataset() if form == "stream" else [dict(row) for row in data]
    assert "for its 'text' column" in refused(check_rows_tokenizer, data, AutoTokenizer.from_pretrained(
        bert_layout_dir))


def test_a_tokenizer_of_the_same_special_ids_is_told_apart_by_the_text(tiny_bert_dir, tmp_path):
    """Another order of the same words: the first id is [CLS] in both, the rest differs; the text tells."""
    data = tokenize_dataset(sentences(), reordered_tokenizer(tmp_path), keep_text=True)
    own = AutoTokenizer.from_pretrained(tiny_bert_dir)
    assert data[0]["input_ids"][0] == own.cls_token_id
    message = refused(check_rows_tokenizer, data, own)
    assert f"where processing_class gives [{own.cls_token_id}, " in message


def padded_forms(tok, texts: list[str]) -> dict[str, list[dict]]:
    """``texts`` tokenized by ``tok`` as a caller may give them: padded on either side, with its attention mask or
    without, cut short, with the model's prompt in front, without special tokens (as lists of rows: quicker to
    make than data sets, and read the same way)."""
    def table(**kwargs) -> dict:
        return {"text": texts, **tok(texts, **kwargs)}

    forms = {"cut_short": table(truncation=True, max_length=5), "no_special": table(add_special_tokens=False),
             "blank": {"text": [""], **tok([""])},  # special tokens alone
             "prompted": {"text": texts, **tok(["query: " + t for t in texts])}}
    for side in ("right", "left"):
        tok.padding_side = side
        padded = table(padding="max_length", max_length=24, truncation=True)
        forms[f"{side}_padded"] = padded
        forms[f"{side}_padded_no_mask"] = {"text": texts, "input_ids": padded["input_ids"]}
    tok.padding_side = "right"
    return {name: [dict(zip(columns, row)) for row in zip(*columns.values())] for name, columns in forms.items()}


@pytest.mark.parametrize("kind", ["bert", "roberta", "no_bos"])
def test_rows_of_the_trainers_own_tokenizer_are_taken_in_any_form(kind, tiny_bert_dir, bpe_roberta_dir, tmp_path):
    tok = {"bert": lambda: AutoTokenizer.from_pretrained(tiny_bert_dir),
           "roberta": lambda: AutoTokenizer.from_pretrained(bpe_roberta_dir),
           "no_bos": lambda: no_bos_tokenizer(tmp_path)}[kind]()
    texts = random_sentences(8)
    given = {"with_text": tokenize_dataset(sentences(8), tok, keep_text=True),
             "without_text": tokenize_dataset(sentences(8), tok),
             "pairs": tokenize_pair_dataset(datasets.Dataset.from_dict({"text": texts, "positive": texts[::-1]}),
                                            tok, keep_text=True),
             **padded_forms(tok, texts)}
    given["stream"] = given["with_text"].to_iterable_dataset()
    given["rows_without_text"] = [{k: v for k, v in row.items() if k != "text"} for row in given["left_padded_no_mask"]]
    for name, data in given.items():
        check_rows_tokenizer(data, tok, "query: ")  # no refusal
    if kind != "no_bos":  # the tokenizers without any leading special token: no id to compare with
        with pytest.raises(DataError):
            check_rows_tokenizer([{**row, "text": None} for row in given["no_special"]], tok)


def test_nothing_is_compared_without_text_where_the_tokenizer_adds_no_leading_token(tiny_bert_dir, tmp_path):
    """A tokenizer that starts a sentence with no special token (GPT-2) leaves no id to compare without text; with
    the text, another tokenizer's rows are still told apart."""
    own = no_bos_tokenizer(tmp_path)
    other = tokenize_dataset(sentences(8), AutoTokenizer.from_pretrained(tiny_bert_dir), keep_text=True)
    check_rows_tokenizer(other.remove_columns("text"), own)
    assert "for its 'text' column" in refused(check_rows_tokenizer, other, own)


@pytest.mark.slow  # three trainers built (~0.9 s)
def test_the_trainers_own_tokenizing_and_the_same_tokenizers_rows_train(tiny_bert_dir, tmp_path):
    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    for keep_text in (True, False):
        assert build(tiny_bert_dir, tokenize_dataset(sentences(), tok, keep_text=keep_text), tmp_path).train_dataset
    assert build(tiny_bert_dir, sentences(), tmp_path).train_dataset
