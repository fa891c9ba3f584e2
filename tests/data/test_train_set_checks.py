"""The training set ContrastiveTrainer is given is checked against its collator and the encoder (hf_cse.data_checks):
untokenized text, something that is no data set, rows past the encoder's positions and token ids outside its
vocabulary are refused in one line naming the numbers and the fix, when the trainer is built (a stream: at its first
batch, before any forward) -- not with torch's ``IndexError: index out of range in self`` inside the first step."""

from __future__ import annotations

import pickle
import re
import string
from pathlib import Path

import datasets
import pytest
import torch
from helpers import long_sentences, random_sentences, tiny_args
from tiny_models import WORDS
from transformers import AutoTokenizer, BertTokenizerFast

from hf_cse.data import DataError, PairCollator, load_train_dataset, tokenize_dataset
from hf_cse.data_checks import EncoderLimits, LimitCheckedCollator
from hf_cse.models import SimCSEModel
from hf_cse.trainer import ContrastiveTrainer
from hf_cse.training_args import ContrastiveTrainingArguments


def text_set(sentences) -> datasets.Dataset:
    return datasets.Dataset.from_dict({"text": list(sentences)})


def build(encoder_dir, data, tmp_path, **kwargs) -> ContrastiveTrainer:
    tok = kwargs.pop("processing_class", None) or AutoTokenizer.from_pretrained(encoder_dir)
    model = kwargs.pop("model", None) or SimCSEModel.from_encoder(str(encoder_dir))
    return ContrastiveTrainer(model=model, args=tiny_args(tmp_path / "out"), train_dataset=data, processing_class=tok,
                              **kwargs)


def refusal(encoder_dir, data, tmp_path, **kwargs) -> str:
    with pytest.raises(DataError) as err:
        build(encoder_dir, data, tmp_path, **kwargs)
    message = str(err.value)
    assert "\n" not in message and "--" not in message  # one line, in the library's terms (no command-line flag)
    return message


# ------------------------------------------------------------------ what the collator reads


def test_sentences_are_tokenized_by_the_trainer_as_tokenize_dataset_does(tiny_bert_dir, tmp_path, caplog):
    """As sentence-transformers' trainer, ContrastiveTrainer takes text: a ``text`` column is tokenized at the papers'
    length (32 tokens), said in one log line naming how to choose another."""
    path = tmp_path / "train.txt"
    path.write_text("\n".join(long_sentences(32, words=40)) + "\n")  # longer than 32 tokens: cut as tokenize_dataset
    sentences = load_train_dataset(str(path))
    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    with caplog.at_level("WARNING", logger="hf_cse.trainer"):
        trainer = build(tiny_bert_dir, sentences, tmp_path, processing_class=tok)
    assert trainer.train_dataset["input_ids"] == tokenize_dataset(sentences, tok)["input_ids"]
    assert max(map(len, trainer.train_dataset["input_ids"])) == 32
    assert "train_dataset: 32 sentences tokenized by the trainer, at most 32 tokens each" in caplog.text
    assert "ContrastiveTrainingArguments(max_seq_length=N) chooses another" in caplog.text
    # a stream is tokenized as it is read
    stream = build(tiny_bert_dir, text_set(random_sentences(32)).to_iterable_dataset(), tmp_path / "s").train_dataset
    assert set(next(iter(stream))) >= {"input_ids", "attention_mask"}


@pytest.mark.parametrize("streamed", [False, True])
def test_the_trainer_cuts_text_at_the_arguments_max_seq_length(tiny_bert_dir, tmp_path, caplog, streamed):
    """ContrastiveTrainingArguments' max_seq_length is where the trainer cuts the sentences it tokenizes (a data set
    or a stream), as tokenize_dataset would at that length."""
    sentences = text_set(long_sentences(24, words=40))
    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    args = ContrastiveTrainingArguments(str(tmp_path / "out"), per_device_train_batch_size=8, max_steps=4,
                                        report_to="none", use_cpu=True, max_seq_length=12)
    data = sentences.to_iterable_dataset() if streamed else sentences
    with caplog.at_level("INFO", logger="hf_cse.trainer"):
        trainer = ContrastiveTrainer(model=SimCSEModel.from_encoder(str(tiny_bert_dir)), args=args,
                                     train_dataset=data, processing_class=tok)
    rows = list(trainer.train_dataset) if streamed else trainer.train_dataset
    assert [row["input_ids"] for row in rows] == tokenize_dataset(sentences, tok, max_seq_length=12)["input_ids"]
    assert {len(row["input_ids"]) for row in rows} == {12}
    assert "at most 12 tokens each (max_seq_length)" in caplog.text


TRIPLETS = {"pair_data": {"kind": "triplets", "anchor": "text", "positive": "positive", "hard_negative": "negative"}}


@pytest.mark.parametrize("kind, facts", [
    ("sentences", {"max_seq_length": 32, "num_sentences": 24}),
    ("stream", {"max_seq_length": 32, "streamed": True}),
    ("triplets", {"max_seq_length": 32, "num_rows": 16, **TRIPLETS}),
    ("streamed triplets", {"max_seq_length": 32, "streamed": True, **TRIPLETS}),
    ("tokenized", {"num_sentences": 24}),  # cut by the caller, at a length the trainer does not know
    ("hub", {"max_seq_length": 32, "num_sentences": 24, "dataset_name": "wiki1m"}),
    ("text file", {"max_seq_length": 32, "num_sentences": 24}),  # a packaged builder's name ("text") is no source
])
def test_the_trainer_records_what_it_knows_of_its_training_set(kind, facts, tiny_bert_dir, tmp_path):
    """The facts ``save_run()`` records and the card shows when it is given none (hf-cse-train gives its own)."""
    from hf_cse.trainer_options import prepare_run

    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    sentences = random_sentences(24)
    (tmp_path / "train.txt").write_text("\n".join(sentences) + "\n")
    triplets = datasets.Dataset.from_dict({"text": sentences[:16], "positive": sentences[1:17],
                                           "negative": sentences[2:18]})
    data = {"sentences": lambda: text_set(sentences), "stream": lambda: text_set(sentences).to_iterable_dataset(),
            "triplets": lambda: triplets, "streamed triplets": lambda: triplets.to_iterable_dataset(),
            "tokenized": lambda: tokenize_dataset(text_set(sentences), tok, max_seq_length=16),
            "hub": lambda: datasets.Dataset.from_dict({"text": sentences},
                                                      info=datasets.DatasetInfo(dataset_name="wiki1m")),
            "text file": lambda: load_train_dataset(str(tmp_path / "train.txt"))}[kind]()
    given = {"model": SimCSEModel.from_encoder(str(tiny_bert_dir)), "args": tiny_args(tmp_path / "out"),
             "train_dataset": data, "processing_class": tok}
    assert prepare_run(given) == facts


@pytest.mark.parametrize("streamed", [False, True])
def test_a_max_seq_length_past_the_encoders_positions_is_refused_before_tokenizing(tiny_bert_dir, tmp_path,
                                                                                 streamed):
    """The rows the trainer cut at 100 tokens were refused as longer than the tiny encoder's 64 positions, with the
    fix for data one tokenized oneself (tokenize_dataset); a stream trained on until its first long batch. The
    length is the argument to fix, named before any text is tokenized."""
    sentences = text_set(long_sentences(16, words=80))
    args = ContrastiveTrainingArguments(str(tmp_path / "out"), per_device_train_batch_size=8, max_steps=1,
                                        report_to="none", use_cpu=True, max_seq_length=100)
    with pytest.raises(DataError) as err:
        ContrastiveTrainer(model=SimCSEModel.from_encoder(str(tiny_bert_dir)), args=args,
                           train_dataset=sentences.to_iterable_dataset() if streamed else sentences,
                           processing_class=AutoTokenizer.from_pretrained(tiny_bert_dir))
    assert str(err.value) == ("max_seq_length 100 exceeds what the encoder takes (64 positions); use max_seq_length "
                              "64 or less (ContrastiveTrainingArguments' max_seq_length: where the trainer cuts the "
                              "sentences it tokenizes).")


def test_sentence_pairs_are_tokenized_by_the_trainer(tiny_bert_dir, tmp_path):
    pairs = datasets.Dataset.from_dict({"text": random_sentences(16), "positive": random_sentences(16, seed=1)})
    columns = build(tiny_bert_dir, pairs, tmp_path).train_dataset.column_names
    assert {"input_ids", "positive_input_ids"} <= set(columns)


def test_a_stream_of_sentence_pairs_trains_on_its_pairs(tiny_bert_dir, tmp_path):
    """A stream's pairs were tokenized as sentences: its positives went unread, and the run trained unsupervised
    SimCSE on the anchors with no word said. Each view is tokenized now, and the pair collator reads them."""
    anchors, positives = random_sentences(16), random_sentences(16, seed=1)
    stream = datasets.Dataset.from_dict({"text": anchors, "positive": positives}).to_iterable_dataset()
    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    trainer = build(tiny_bert_dir, stream, tmp_path, processing_class=tok)
    rows = list(trainer.train_dataset.take(2))
    batch = trainer.data_collator(rows)
    assert batch["input_ids"].shape[:2] == (2, 2)  # (rows, views): anchor and positive
    for i in range(2):
        assert [tok.decode(batch["input_ids"][i, view], skip_special_tokens=True) for view in (0, 1)] == \
            [anchors[i], positives[i]]


@pytest.mark.parametrize("method", ["esimcse", "diffcse"])
def test_pair_rows_for_a_method_that_makes_its_own_second_view_are_refused(method, tiny_bert_dir, tmp_path):
    """ESimCSE trained on them as supervised SimCSE does, silently; DiffCSE failed at its first step, naming its
    collator. hf-cse-train refuses --pair_column for both; the trainer now refuses the rows when it is built (DiffCSE
    a stream of them as any stream, before it is read)."""
    from hf_cse.models import get_method

    pairs = datasets.Dataset.from_dict({"text": random_sentences(16), "positive": random_sentences(16, seed=1)})
    options = {"generator_name_or_path": "unigram"} if method == "diffcse" else {}
    model = get_method(method).from_encoder(str(tiny_bert_dir), **options)
    for data in (pairs, pairs.to_iterable_dataset()):
        streamed_diffcse = method == "diffcse" and isinstance(data, datasets.IterableDataset)
        with pytest.raises(DataError, match=r"train_dataset is a stream \(IterableDataset\), which method='diffcse' "
                                            "does not train from" if streamed_diffcse
                           else f"holds pair rows .a positive column., and {method} does not train on them: its "
                                "second view is"):
            ContrastiveTrainer(model=model, args=tiny_args(tmp_path / "out"), train_dataset=data,
                               processing_class=AutoTokenizer.from_pretrained(tiny_bert_dir))


@pytest.mark.parametrize("method, options", [("simcse", {"objectives": ["paradigm"]}), ("imsimcse", {})])
def test_hard_negatives_for_a_loss_that_takes_none_are_refused_when_the_trainer_is_built(method, options,
                                                                                        tiny_bert_dir, tmp_path):
    """Seen before: the trainer was built, train() scored the dev set at step 0 and entered the step loop, and only
    then HardNegativesNotTakenError came, many frames deep, with no fix (ImSimCSE's default off_dropout_infonce too).
    hf-cse-train refuses --negative_column for such a loss; the trainer now refuses the rows when it is built."""
    from hf_cse.models import get_method

    triplets = datasets.Dataset.from_dict({c: random_sentences(16, seed=i)
                                           for i, c in enumerate(("text", "positive", "negative"))})
    loss = "paradigm" if method == "simcse" else "off_dropout_infonce"
    said = refusal(tiny_bert_dir, triplets, tmp_path, model=get_method(method).from_encoder(str(tiny_bert_dir),
                                                                                           **options))
    assert said.startswith(f"loss {loss!r} has no defined use for hard negatives (train_dataset's negative column); "
                           "the losses that take them: ")  # the registry's: focal_infonce, gs_infonce, infonce, ...
    assert said.endswith(" Drop the column (dataset.remove_columns('negative')), or give the model one of those losses "
                         "(from_encoder(..., objectives=[...])).")
    build(tiny_bert_dir, triplets, tmp_path, model=SimCSEModel.from_encoder(str(tiny_bert_dir)))  # infonce takes them


@pytest.mark.parametrize("columns, hard_negative_weight, refused", [
    (("text", "negative"), 0.0, "has a negative column but no positive one"),
    (("text", "positive"), 1.0, "the infonce objective's hard_negative_weight weighs hard negatives, but train_dataset "
                                "has none"),
    (("text",), 1.0, "hard_negative_weight weighs hard negatives"),
    (("text", "positive", "negative"), 1.0, None),
])
def test_rows_an_objective_or_a_view_would_leave_unread_are_refused(columns, hard_negative_weight, refused,
                                                                    tiny_bert_dir, tmp_path):
    """Hard negatives without positives went unread; a hard_negative_weight without hard negatives weighed
    nothing. hf-cse-train refuses both by their flags; the trainer refuses the rows when it is built."""
    from hf_cse.trainer_dataset import check_rows_for_model, pair_rows

    data = datasets.Dataset.from_dict({c: random_sentences(16, seed=i) for i, c in enumerate(columns)})
    model = SimCSEModel.from_encoder(str(tiny_bert_dir), objectives=[
        {"loss": "infonce", "weight": 1.0, "hyperparameters": {"hard_negative_weight": hard_negative_weight}}])
    if refused is None:  # triplets: read by the pair collator, the hard negatives weighed
        check_rows_for_model(model, pair_rows(data))
        collator = build(tiny_bert_dir, data, tmp_path, model=model).data_collator
        assert isinstance(getattr(collator, "collator", collator), PairCollator)
        return
    with pytest.raises(DataError, match=refused):
        build(tiny_bert_dir, data, tmp_path, model=model)


@pytest.mark.parametrize("columns, refused", [
    ({"text": [*random_sentences(15), None]}, "the training set's 'text' column has an empty cell (None) where a "
                                              "sentence should be: remove or fill those rows first"),
    ({"text": random_sentences(16), "positive": [None, *random_sentences(15)]}, "'positive' column has an empty cell"),
    ({"text": list(range(16))}, "the training set's 'text' column holds int values (e.g. 0), not sentences"),
])
@pytest.mark.parametrize("streamed", [False, True])
def test_text_cells_that_are_no_sentences_are_refused_in_one_line(columns, refused, streamed, tiny_bert_dir,
                                                                 tmp_path):
    """A None (an empty cell) or a number among the texts failed inside the tokenizer, with its own TypeError
    ("TextEncodeInput must be Union[...]"); a data set is refused when the trainer is built, a stream when its
    first batch is read."""
    data = datasets.Dataset.from_dict(columns)
    with pytest.raises(DataError, match=re.escape(refused)):
        trainer = build(tiny_bert_dir, data.to_iterable_dataset() if streamed else data, tmp_path)
        next(iter(trainer.train_dataset))


def test_tokenized_anchors_beside_untokenized_positives_are_refused(tiny_bert_dir, tmp_path):
    """Anchors tokenized by one's own map, the positive text kept: the trainer once trained unsupervised SimCSE on the
    anchors alone (positives unread), and a positive text column alone now made the pair collator fail at the first
    step; refused when the trainer is built."""
    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    data = datasets.Dataset.from_dict({"text": random_sentences(16), "positive": random_sentences(16, seed=1)}).map(
        lambda batch: tok(batch["text"], truncation=True, max_length=32), batched=True)
    assert refusal(tiny_bert_dir, data, tmp_path) == (
        "train_dataset is tokenized (input_ids) but its positive text is not (no positive_input_ids): tokenize every "
        "view with hf_cse.data.tokenize_pair_dataset(dataset, tokenizer), or pass the rows untokenized for the trainer "
        "to tokenize.")


def test_a_stream_whose_columns_are_not_known_is_read_by_its_first_rows(tiny_bert_dir, tmp_path):
    """A stream made from a generator, or mapped without features, has no known columns: the trainer reads them from
    its first rows (datasets' inference), so pair tokens are collated as pairs and text is tokenized -- not taken
    for sentences, nor refused as untokenized text in a 'text' column."""
    from hf_cse.data import tokenize_pair_dataset

    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    pairs = datasets.Dataset.from_dict({"text": random_sentences(16), "positive": random_sentences(16, seed=1)})
    stream = tokenize_pair_dataset(pairs, tok).to_iterable_dataset().map(lambda row: row)
    assert stream.column_names is None
    trainer = build(tiny_bert_dir, stream, tmp_path, processing_class=tok)
    assert trainer.data_collator(list(stream.take(2)))["input_ids"].shape[:2] == (2, 2)  # (rows, views)

    sentences = random_sentences(16)
    generated = datasets.IterableDataset.from_generator(lambda: ({"text": s} for s in sentences))
    assert generated.column_names is None
    trainer = build(tiny_bert_dir, generated, tmp_path)
    rows = list(trainer.train_dataset.take(2))
    assert [row["input_ids"] for row in rows] == tok(sentences[:2], truncation=True, max_length=32)["input_ids"]

    # columns still unknown when the trainer was built (a collator used apart from it): the batch says so
    collate = LimitCheckedCollator(SimCSEModel.collator(tok, None), EncoderLimits(None, None), pair_rows=False)
    with pytest.raises(DataError, match="hold pair rows .positive_input_ids., which the trainer took for sentences"):
        collate(list(stream.take(2)))


def test_untokenized_text_in_another_column_is_refused_naming_the_fix(tiny_bert_dir, tmp_path, caplog):
    message = refusal(tiny_bert_dir, datasets.Dataset.from_dict({"sentence": random_sentences(32)}), tmp_path)
    # the error alone: no warning first that the run trains on a text column (there is none) without the sentences
    assert not [r for r in caplog.records if "not read" in r.getMessage()]
    assert message == ("the training set has no input_ids (its columns: sentence): it is not tokenized. Name its "
                       "sentence column 'text' (dataset.rename_column) for the trainer to tokenize it, or tokenize it "
                       "first with hf_cse.data.tokenize_dataset(dataset, tokenizer).")
    # a stream whose columns are known is refused as early
    stream = datasets.Dataset.from_dict({"sentence": random_sentences(32)}).to_iterable_dataset()
    assert "not tokenized" in refusal(tiny_bert_dir, stream, tmp_path)
    pairs = datasets.Dataset.from_dict({"anchor": random_sentences(16), "positive": random_sentences(16, seed=1)})
    assert "hf_cse.data.tokenize_pair_dataset(dataset, tokenizer)" in refusal(tiny_bert_dir, pairs, tmp_path)


def test_a_tokenized_set_whose_ids_column_has_another_name_is_told_to_name_it_input_ids(tiny_bert_dir, tmp_path):
    """Seen before: "it is not tokenized. Name its sentence column 'text'", for a set with attention_mask and
    token_type_ids and no text column."""
    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    tokenized = text_set(random_sentences(16)).map(lambda b: tok(b["text"]), batched=True).remove_columns("text")
    assert refusal(tiny_bert_dir, tokenized.rename_column("input_ids", "ids"), tmp_path) == (
        "the training set looks tokenized (attention_mask and token_type_ids present) but has no input_ids (its "
        "columns: ids, token_type_ids, attention_mask): name its token ids' column input_ids "
        "(dataset.rename_column('ids', 'input_ids')).")
    several = tokenized.rename_column("input_ids", "ids").add_column("label", [0] * 16)
    assert refusal(tiny_bert_dir, several, tmp_path).endswith(
        "name its token ids' column input_ids (dataset.rename_column).")


def test_a_list_of_rows_of_text_is_refused_naming_the_data_set_the_trainer_tokenizes(tiny_bert_dir, tmp_path):
    """It was told to name its sentence column 'text', which it had."""
    rows = [{"text": sentence} for sentence in random_sentences(16)]
    assert refusal(tiny_bert_dir, rows, tmp_path) == (
        "train_dataset is a list of 16 rows of text, which the trainer does not tokenize (it tokenizes the 'text' "
        "column of a datasets data set): pass datasets.Dataset.from_list(rows), or tokenize them first with "
        "hf_cse.data.tokenize_dataset(dataset, tokenizer).")


@pytest.mark.parametrize("data, what", [
    (random_sentences(16), "a list of 16 sentences"),
    ("train.txt", "a path ('train.txt')"),
    (Path("train.txt"), "a path ('train.txt')"),
    ({"text": random_sentences(16)}, "a dict of the columns text"),
    (42, "of type int"),
])
def test_what_is_no_data_set_is_refused(data, what, tiny_bert_dir, tmp_path):
    message = refusal(tiny_bert_dir, data, tmp_path)
    assert message == (f"train_dataset is {what}, not a data set: pass datasets.Dataset.from_dict({{'text': "
                       "sentences}) (the trainer tokenizes its text column), or read a file of sentences with "
                       "hf_cse.data.load_train_dataset(train_file).")


def test_a_dataset_dict_is_refused_naming_a_split(tiny_bert_dir, tmp_path):
    splits = datasets.DatasetDict({"train": text_set(random_sentences(16))})
    assert refusal(tiny_bert_dir, splits, tmp_path) == (
        "train_dataset is a DatasetDict (splits: train), not one data set: pass one split, e.g. dataset['train'], "
        "tokenized with hf_cse.data.tokenize_dataset(dataset, tokenizer).")


def test_a_collator_of_ones_own_may_read_text(tiny_bert_dir, tmp_path):
    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)

    def own(rows):  # tokenizes itself: the data is its business
        return tok([r["text"] for r in rows], padding=True, return_tensors="pt")

    trainer = build(tiny_bert_dir, text_set(random_sentences(16)), tmp_path, data_collator=own)
    assert trainer.data_collator is own


def test_a_collator_of_hf_cse_gets_the_text_column_tokenized(tiny_bert_dir, tmp_path):
    """With a data_collator given, the text column was left untokenized and refused with "Name its sentence column
    'text'", which it was."""
    from hf_cse.data import TwoViewCollator

    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    trainer = build(tiny_bert_dir, text_set(random_sentences(16)), tmp_path, data_collator=TwoViewCollator(tok))
    assert {"input_ids", "text"} <= set(trainer.train_dataset.column_names)
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(2)])
    assert batch["input_ids"].shape[:2] == (2, 2)  # two rows, two views
    # without the tokenizer the trainer cannot tokenize: said as such, with both fixes
    model = SimCSEModel.from_encoder(str(tiny_bert_dir))
    with pytest.raises(DataError) as refused:
        ContrastiveTrainer(model=model, args=tiny_args(tmp_path / "out"), train_dataset=text_set(random_sentences(16)),
                           data_collator=TwoViewCollator(tok))
    assert str(refused.value) == ("the training set's text column is not tokenized (no input_ids): pass "
                                  "processing_class=tokenizer for the trainer to tokenize it, or tokenize it first "
                                  "with hf_cse.data.tokenize_dataset(dataset, tokenizer).")


def test_a_collator_of_transformers_with_text_is_refused_when_the_trainer_is_built(tiny_bert_dir, tmp_path):
    """It failed inside transformers' tokenizer.pad at the first batch."""
    from transformers import DataCollatorWithPadding

    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    message = refusal(tiny_bert_dir, text_set(random_sentences(16)), tmp_path,
                      data_collator=DataCollatorWithPadding(tok))
    assert message == ("data_collator DataCollatorWithPadding is transformers' and the training set holds text: "
                       "leave data_collator out (the trainer tokenizes the text column for the method's collator, "
                       "which makes the views each method trains on), or pass one of hf_cse's, e.g. "
                       "model.collator(tokenizer, model.config).")


# ------------------------------------------------------------------ what the encoder can embed


def test_rows_longer_than_the_position_limit_are_refused_with_both_numbers(tiny_bert_dir, tmp_path):
    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    data = tokenize_dataset(text_set(long_sentences(16, 100)), tok, max_seq_length=128)  # 64 positions
    assert max(map(len, data["input_ids"])) == 102
    assert refusal(tiny_bert_dir, data, tmp_path, processing_class=tok) == (
        "the training set has rows of up to 102 tokens, more than the encoder's position limit of 64: tokenize the "
        "sentences with hf_cse.data.tokenize_dataset, the encoder's own tokenizer and max_seq_length 64 or less.")


def test_roberta_rows_may_fill_the_positions_after_its_padding_offset(tiny_roberta_dir, tmp_path):
    tok = AutoTokenizer.from_pretrained(tiny_roberta_dir)  # 80 position embeddings - padding_idx 1 - 1 = 78 tokens
    too_long = tokenize_dataset(text_set(long_sentences(16, 77)), tok, max_seq_length=79)
    assert "rows of up to 79 tokens, more than the encoder's position limit of 78" in refusal(
        tiny_roberta_dir, too_long, tmp_path, processing_class=tok)
    fits = tokenize_dataset(text_set(long_sentences(16, 76)), tok, max_seq_length=78)
    build(tiny_roberta_dir, fits, tmp_path, processing_class=tok)


def shifted_tokenizer(folder: Path) -> BertTokenizerFast:
    """Another tokenizer of the same words: 300 tokens of its own come first, so every word has a larger id."""
    own = [f"extra{i}" for i in range(300)]
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *own, *string.ascii_lowercase, *WORDS]
    return BertTokenizerFast(vocab={t: i for i, t in enumerate(dict.fromkeys(tokens))}, do_lower_case=True)


def test_ids_of_another_tokenizer_are_refused_with_the_id_and_the_vocabulary_size(tiny_bert_dir, tmp_path):
    other = shifted_tokenizer(tmp_path)
    data = tokenize_dataset(text_set(random_sentences(16)), other, max_seq_length=32)
    vocab = SimCSEModel.from_encoder(str(tiny_bert_dir)).get_input_embeddings().num_embeddings
    highest = max(max(ids) for ids in data["input_ids"])
    assert highest >= vocab
    assert refusal(tiny_bert_dir, data, tmp_path) == (  # the encoder's tokenizer given, the rows tokenized apart
        f"the training set holds token id {highest}, outside the encoder's vocabulary of {vocab} ids "
        f"(0-{vocab - 1}): it was tokenized with another tokenizer. Tokenize the sentences with "
        "hf_cse.data.tokenize_dataset, the encoder's own tokenizer (AutoTokenizer.from_pretrained of the encoder) "
        "and max_seq_length 64 or less.")


def test_only_the_rows_a_filter_keeps_are_checked(tiny_bert_dir, tmp_path):
    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    mixed = tokenize_dataset(text_set(long_sentences(8, 100) + random_sentences(24)), tok, max_seq_length=128)
    kept = mixed.filter(lambda row: len(row["input_ids"]) <= 64)  # an indices mapping over the whole table
    assert len(kept) == 24
    trainer = build(tiny_bert_dir, kept, tmp_path, processing_class=tok)
    assert not isinstance(trainer.data_collator, LimitCheckedCollator)  # checked whole: no check per batch


@pytest.mark.slow  # a training start (~0.7 s here); the check itself: the next test
@pytest.mark.parametrize("as_stream", [True, False], ids=["stream", "list_of_rows"])
def test_data_that_cannot_be_read_ahead_is_refused_at_its_first_batch_before_any_forward(as_stream, tiny_bert_dir,
                                                                                        tmp_path, monkeypatch):
    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    data = tokenize_dataset(text_set(long_sentences(16, 100)), tok, max_seq_length=128)
    data = data.to_iterable_dataset() if as_stream else [dict(row) for row in data]
    trainer = build(tiny_bert_dir, data, tmp_path, processing_class=tok)
    assert isinstance(trainer.data_collator, LimitCheckedCollator) and trainer.data_collator.tokenizer is tok
    forwards = []
    monkeypatch.setattr(type(trainer.model), "forward", lambda self, **kw: forwards.append(kw))
    with pytest.raises(DataError) as err:
        trainer.train()
    assert str(err.value) == (
        "a training batch has rows of up to 102 tokens, more than the encoder's position limit of 64: tokenize the "
        "sentences with hf_cse.data.tokenize_dataset, the encoder's own tokenizer and max_seq_length 64 or less.")
    assert forwards == []


def test_the_batch_check_reads_python_rows_and_survives_pickling(tiny_bert_dir):
    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    collate = pickle.loads(pickle.dumps(LimitCheckedCollator(SimCSEModel.collator(tok, None), EncoderLimits(8, 50))))
    rows = [{"input_ids": [2, 7, 3]}, {"input_ids": [2, 9, 9, 3]}]
    assert collate(rows)["input_ids"].shape == (2, 2, 4)
    with pytest.raises(DataError, match="a training batch holds token id -1, outside the encoder's vocabulary of 50 "
                                        r"ids \(0-49\)"):
        collate([*rows, {"input_ids": [2, -1, 3]}])
    with pytest.raises(DataError, match="rows of up to 9 tokens, more than the encoder's position limit of 8"):
        collate([*rows, {"input_ids": [2] * 9}])
    with pytest.raises(DataError, match="not a data set: pass datasets.Dataset.from_dict"):
        collate(["a sentence"])
    tensors = [{"input_ids": torch.tensor([2, 60, 3])}]  # a torch data set's rows
    with pytest.raises(DataError, match="token id 60"):
        collate(tensors)


@pytest.mark.slow
def test_diffcse_insert_edits_take_rows_their_masks_keep_within_the_discriminators_positions(tiny_bert_dir, tmp_path):
    from hf_cse.models import DiffCSEModel

    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)  # 64 positions

    def build_diffcse(data, edit_operation):
        model = DiffCSEModel.from_encoder(str(tiny_bert_dir), edit_operation=edit_operation, masking_ratio=0.3,
                                          generator_name_or_path="unigram")
        return ContrastiveTrainer(model=model, args=tiny_args(tmp_path / "out"), train_dataset=data,
                                  processing_class=tok)

    # a row of 60 tokens (58 ordinary) gets round(0.3 * 58) = 17 [MASK]s: 77 positions; 50 is the longest that fits
    rows60 = tokenize_dataset(text_set(long_sentences(16, 58)), tok, max_seq_length=64)
    assert max(map(len, rows60["input_ids"])) == 60
    with pytest.raises(DataError) as refused:
        build_diffcse(rows60, "insert")
    assert str(refused.value) == (
        "the training set has rows of up to 60 tokens, more than the 50 that DiffCSE's insert edits (masking_ratio "
        "0.3) keep within the discriminator's 64 positions: tokenize the sentences with hf_cse.data.tokenize_dataset, "
        "the encoder's own tokenizer and max_seq_length 50 or less.")
    # text the trainer tokenized at the arguments' max_seq_length: the fix is that length, not tokenizing oneself
    with pytest.raises(DataError) as refused:
        ContrastiveTrainer(model=DiffCSEModel.from_encoder(str(tiny_bert_dir), edit_operation="insert",
                                                           masking_ratio=0.3, generator_name_or_path="unigram"),
                           args=ContrastiveTrainingArguments(str(tmp_path / "out"), max_seq_length=64, use_cpu=True,
                                                             per_device_train_batch_size=8, report_to="none"),
                           train_dataset=text_set(long_sentences(16, 58)), processing_class=tok)
    assert str(refused.value).endswith("keep within the discriminator's 64 positions: the trainer cut the text at "
                                       "max_seq_length 64: set max_seq_length=50 or less in the training arguments.")
    build_diffcse(rows60, "replace")  # replace edits keep the length
    fits = build_diffcse(tokenize_dataset(text_set(long_sentences(16, 58)), tok, max_seq_length=50), "insert")
    fits.train()  # edited rows of 50 + 14 = 64 tokens: the discriminator takes them
    assert fits.state.global_step == 4


@pytest.mark.parametrize("columns", [["text"], ["text", "positive"]])
def test_an_empty_training_set_is_refused_as_empty(columns, tiny_bert_dir, tmp_path):
    """Sentences failed inside datasets (IndexError: Invalid key: 0 is out of bounds for size 0)."""
    empty = datasets.Dataset.from_dict({column: [] for column in columns}, features=datasets.Features(
        {column: datasets.Value("string") for column in columns}))
    assert refusal(tiny_bert_dir, empty, tmp_path) == (
        "the training set is empty (no rows): give it at least one global batch of 8.")


@pytest.mark.parametrize("column", ["text", "positive", "negative"])
def test_a_pair_row_with_a_blank_text_is_refused(column, tiny_bert_dir, tmp_path):
    """A blank positive trained silently (every such row the same input), where None was refused."""
    rows = {"text": random_sentences(16), "positive": random_sentences(16, seed=1),
            "negative": random_sentences(16, seed=2)}
    rows[column][5] = "  "
    assert refusal(tiny_bert_dir, datasets.Dataset.from_dict(rows), tmp_path) == (
        f"the training set's {column!r} column has an empty cell where a sentence should be: every pair / triplet "
        f"row needs all its texts; remove those rows first, e.g. dataset.filter(lambda row: row[{column!r}].strip()).")


SENTENCES = random_sentences(16)
OTHERS = SENTENCES[::-1]


@pytest.mark.parametrize("columns, warned", [
    ({"text": SENTENCES, "text_b": OTHERS},
     "train_dataset's column text_b (strings) is not read: the run trains on the text column alone (sentences). To "
     "train on (text, text_b) pairs, name the second sentence's column positive (dataset.rename_column('text_b', "
     "'positive')); else drop it: dataset.remove_columns(['text_b'])."),
    # sentence1 renamed to text: its sentence2, not the ids or the labels (a string one too: SNLI's gold_label)
    ({"text": SENTENCES, "sentence2": OTHERS, "id": [str(i) for i in range(16)], "pairID": ["p"] * 16,
      "label": list(range(16)), "gold_label": ["entailment"] * 16},
     "train_dataset's column sentence2 (strings) is not read: the run trains on the text column alone (sentences). "
     "To train on (text, sentence2) pairs, name the second sentence's column positive "
     "(dataset.rename_column('sentence2', 'positive')); else drop it: dataset.remove_columns(['sentence2'])."),
    ({"text": SENTENCES, "positive": OTHERS, "other": SENTENCES},
     "train_dataset's column other (strings) is not read: the run trains on the text and positive columns alone "
     "(pairs). For hard negatives, name their column negative (dataset.rename_column('other', 'negative')); else drop "
     "it: dataset.remove_columns(['other'])."),
    ({"text": SENTENCES, "positive": OTHERS, "negative": SENTENCES[1:] + SENTENCES[:1], "a": OTHERS, "b": OTHERS},
     "train_dataset's columns a, b (strings) are not read: the run trains on the text, positive and negative columns "
     "alone (triplets). Drop them: dataset.remove_columns(['a', 'b'])."),
    ({"text": SENTENCES, "label": list(range(16)), "id": [str(i) for i in range(16)]}, None),
    ({"text": SENTENCES, "positive": OTHERS}, None),
])
@pytest.mark.parametrize("streamed", [False, True])
def test_text_columns_the_run_does_not_read_are_named_with_how_to_use_them(columns, warned, streamed, tiny_bert_dir,
                                                                           tmp_path, caplog):
    """A second sentence column beside ``text`` was dropped when the trainer tokenized: the run trained on the
    sentences alone, unsupervised, and nothing said so."""
    data = datasets.Dataset.from_dict(columns)
    with caplog.at_level("WARNING", logger="hf_cse"):
        build(tiny_bert_dir, data.to_iterable_dataset() if streamed else data, tmp_path)
    said = [r.getMessage() for r in caplog.records if "is not read" in r.getMessage() or "are not read" in
            r.getMessage()]
    assert said == ([warned] if warned else [])


def test_unread_text_columns_of_a_method_without_pair_rows_are_to_be_dropped(tiny_bert_dir, tmp_path, caplog):
    from hf_cse.models import ESimCSEModel

    data = datasets.Dataset.from_dict({"text": SENTENCES, "text_b": OTHERS})
    with caplog.at_level("WARNING", logger="hf_cse"):
        build(tiny_bert_dir, data, tmp_path, model=ESimCSEModel.from_encoder(str(tiny_bert_dir)))
    assert ("train_dataset's column text_b (strings) is not read: the run trains on the text column alone, and "
            "ESimCSEModel takes no pair rows. Drop it: dataset.remove_columns(['text_b']).") in caplog.messages


def test_unread_text_beside_tokens_is_named_with_the_tokenizing_to_redo(tiny_bert_dir, tmp_path, caplog):
    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    data = tokenize_dataset(text_set(SENTENCES), tok, keep_text=True).add_column("text_b", OTHERS)
    with caplog.at_level("WARNING", logger="hf_cse"):
        build(tiny_bert_dir, data, tmp_path, processing_class=tok)
    assert ("train_dataset's column text_b (strings) is not read: the run trains on the text column alone "
            "(sentences). To train on (text, text_b) pairs, name the second sentence's column positive "
            "(dataset.rename_column('text_b', 'positive')) and pass the rows untokenized (or tokenized with "
            "hf_cse.data.tokenize_pair_dataset); else drop it: dataset.remove_columns(['text_b']).") in caplog.messages
