"""The trainer's tokenizer is the encoder's (hf_cse.tokenizer_match): a tokenizer of another model whose ids fit the
embedding matrix trained, saved and exported silently, reading other tokens' embeddings; now refused when the
trainer is built, naming the folder whose tokenizer to load. A path given for the tokenizer gets one line too."""

from __future__ import annotations

import datasets
import pytest
from helpers import random_sentences, tiny_args
from tiny_models import bert_layout_tokenizer, save_weights_only, tiny_tokenizer, write_vocab
from transformers import AutoConfig, AutoModel, AutoTokenizer, BertTokenizerFast

from hf_cse.errors import CSEError
from hf_cse.files import DataError
from hf_cse.models import SimCSEModel
from hf_cse.tokenizer_match import is_stand_in
from hf_cse.trainer import ContrastiveTrainer


def build(encoder_dir, tokenizer, tmp_path, model=None) -> ContrastiveTrainer:
    data = datasets.Dataset.from_dict({"text": random_sentences(32)})
    return ContrastiveTrainer(model=model or SimCSEModel.from_encoder(str(encoder_dir)),
                              args=tiny_args(tmp_path / "out"), train_dataset=data, processing_class=tokenizer)


def reordered_tokenizer(folder) -> BertTokenizerFast:
    """The encoder's tokens in another order: every id fits its embedding matrix, most read another token's row."""
    tokens = write_vocab(folder).read_text().split()
    reordered = tokens[:5] + tokens[5:][::-1]  # the special tokens keep their ids
    return BertTokenizerFast(vocab={t: i for i, t in enumerate(reordered)}, do_lower_case=True)


def test_a_tokenizer_of_another_vocabulary_whose_ids_fit_is_refused(tiny_bert_dir, tmp_path):
    other = reordered_tokenizer(tmp_path / "other")
    assert len(other) == len(AutoTokenizer.from_pretrained(tiny_bert_dir))  # no id is out of range
    with pytest.raises(DataError) as err:
        build(tiny_bert_dir, other, tmp_path)
    expected = AutoTokenizer.from_pretrained(tiny_bert_dir).get_vocab()
    moved = sorted((t for t in expected if expected[t] != other.get_vocab()[t]), key=expected.get)
    assert len(moved) > len(expected) / 2
    assert str(err.value) == (
        f"processing_class is not the encoder's tokenizer: its vocabulary differs from the tokenizer saved with "
        f"{tiny_bert_dir}: {len(moved)} of its {len(expected)} tokens are missing or have another id (e.g. "
        f"{moved[0]!r}: {other.get_vocab()[moved[0]]} instead of {expected[moved[0]]}), so the encoder would read "
        f"other tokens' embeddings. Pass AutoTokenizer.from_pretrained({str(tiny_bert_dir)!r}).")


def test_the_encoders_tokenizer_from_elsewhere_or_with_added_tokens_trains(tiny_bert_dir, tmp_path):
    """The same vocabulary saved in another folder, and one with tokens added beside it, are the encoder's."""
    copy = AutoTokenizer.from_pretrained(tiny_bert_dir)
    copy.save_pretrained(tmp_path / "copy")
    assert build(tiny_bert_dir, AutoTokenizer.from_pretrained(tmp_path / "copy"), tmp_path).train_dataset
    added = AutoTokenizer.from_pretrained(tiny_bert_dir)
    added.add_tokens(["<extra>"])
    assert build(tiny_bert_dir, added, tmp_path).train_dataset


def test_a_saved_run_is_compared_with_its_own_tokenizer(tiny_bert_dir, tmp_path):
    """A model loaded from a run folder (continued training): its folder's tokenizer is the reference."""
    model = SimCSEModel.from_encoder(str(tiny_bert_dir))
    model.save_pretrained(tmp_path / "run")
    AutoTokenizer.from_pretrained(tiny_bert_dir).save_pretrained(tmp_path / "run")
    reloaded = SimCSEModel.from_pretrained(tmp_path / "run")
    with pytest.raises(DataError, match=f"tokenizer saved with {tmp_path / 'run'}: "):
        build(tiny_bert_dir, reordered_tokenizer(tmp_path / "other"), tmp_path, model=reloaded)


def test_nothing_is_compared_where_no_tokenizer_was_saved(tiny_bert_dir, tmp_path):
    """An encoder folder without a tokenizer (weights only): nothing to compare with, the tokenizer is taken."""
    model = SimCSEModel.from_encoder(str(tiny_bert_dir))
    model.encoder.save_pretrained(tmp_path / "weights_only")
    bare = SimCSEModel.from_encoder(str(tmp_path / "weights_only"))
    assert build(tmp_path / "weights_only", reordered_tokenizer(tmp_path / "other"), tmp_path, model=bare)


@pytest.mark.parametrize("layout", ["bert-base", "roberta"])
def test_an_encoder_saved_without_its_tokenizer_trains_with_the_matching_one(layout, tiny_roberta_dir, tmp_path):
    """A folder of weights only (``model.save_pretrained`` without the tokenizer) trained with its tokenizer loaded
    from elsewhere: it was refused ("4 of its 5 tokens are missing"), compared with the stand-in transformers builds
    from the folder's config (BERT's [PAD] [UNK] [CLS] [SEP] [MASK] at ids 0-4, RoBERTa's <pad> <unk> <s> </s>
    <mask>), and told to pass that stand-in."""
    if layout == "roberta":
        folder = tmp_path / "weights_only"
        AutoModel.from_pretrained(tiny_roberta_dir).save_pretrained(folder)
        tokenizer = AutoTokenizer.from_pretrained(tiny_roberta_dir)
    else:  # [UNK] 100, [CLS] 101 ...: as bert-base-uncased's
        tokenizer = bert_layout_tokenizer(tmp_path / "vocab")
        folder = save_weights_only(tmp_path / "weights_only", tokenizer, masked_lm=True)
    assert not any(folder.glob("tokenizer*")) and not any(folder.glob("vocab*"))
    trainer = build(folder, tokenizer, tmp_path)
    assert trainer.processing_class is tokenizer
    first = trainer.train_dataset[0]["input_ids"]
    assert first[0] == tokenizer.cls_token_id and all(i < len(tokenizer) for i in first)


@pytest.mark.parametrize("model_type", ["bert", "roberta", "gpt2", "t5", "deberta-v2"])
def test_what_transformers_loads_from_a_folder_without_tokenizer_files_is_a_stand_in(model_type, tmp_path):
    """config.json alone: transformers 5 builds the class the config names with no vocabulary beside its special
    tokens (T5's adds the word-start mark "▁"), which no encoder was trained with."""
    AutoConfig.for_model(model_type).save_pretrained(tmp_path)
    assert is_stand_in(AutoTokenizer.from_pretrained(tmp_path))


def test_a_tokenizer_config_without_a_vocabulary_is_a_stand_in_and_a_small_vocabulary_is_not(tmp_path):
    tiny = tiny_tokenizer(tmp_path / "vocab")
    tiny.save_pretrained(tmp_path / "config_only")
    (tmp_path / "config_only" / "tokenizer.json").unlink()  # tokenizer_config.json is left
    assert is_stand_in(AutoTokenizer.from_pretrained(tmp_path / "config_only"))
    assert not is_stand_in(tiny)
    five_words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "mat"]
    assert not is_stand_in(BertTokenizerFast(vocab={t: i for i, t in enumerate(five_words)}))
    # a vocabulary built with add_tokens: words, though added ones (only special added tokens are reserved)
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.WordLevel({"[UNK]": 0, "[PAD]": 1}, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    added = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]", pad_token="[PAD]")
    added.add_tokens([f"word{i}" for i in range(500)])
    assert not is_stand_in(added)


def test_a_path_given_as_the_tokenizer_is_refused_in_one_line(tiny_bert_dir, tmp_path):
    """It failed inside hf_cse.data with "'str' object has no attribute 'num_special_tokens_to_add'"."""
    with pytest.raises(CSEError) as err:
        build(tiny_bert_dir, str(tiny_bert_dir), tmp_path)
    assert str(err.value) == (f"processing_class is a path ({str(tiny_bert_dir)!r}), not a tokenizer: pass "
                              f"AutoTokenizer.from_pretrained({str(tiny_bert_dir)!r}).")
