"""The export's tokenizer: a tokenizer that was asked for must load (no silent fall-back to the checkpoint's), and
one made for another model (more tokens than embedding rows, other special-token ids, another token -> id mapping)
is refused with one clear line instead of producing an export that reads the wrong embedding rows."""

from __future__ import annotations

import pytest
from tiny_models import write_vocab
from transformers import AutoModel, AutoTokenizer, BertConfig, BertTokenizerFast

from hf_cse.cli.export import main
from hf_cse.export import ExportError, to_sentence_transformer
from hf_cse.export.checkpoint import load_tokenizer
from hf_cse.models import SimCSEModel


@pytest.fixture
def checkpoint(tiny_bert_dir, tmp_path):
    folder = tmp_path / "ckpt"
    SimCSEModel.from_encoder(str(tiny_bert_dir)).save_pretrained(folder)
    AutoTokenizer.from_pretrained(tiny_bert_dir).save_pretrained(folder)
    return folder


def save_tokenizer(folder, tokens):
    BertTokenizerFast(vocab={t: i for i, t in enumerate(tokens)}, do_lower_case=True).save_pretrained(folder)
    return folder


def tiny_tokens(tmp_path):
    return write_vocab(tmp_path / "vocab").read_text().split()


def test_missing_tokenizer_folder_is_an_error_not_a_fall_back(checkpoint, tmp_path):
    out = tmp_path / "st"
    with pytest.raises(ExportError, match=r"tokenizer .*nope could not be loaded"):
        to_sentence_transformer(checkpoint, out, tokenizer=tmp_path / "nope")
    assert not out.exists()


def test_tokenizer_with_more_tokens_than_embedding_rows_is_refused(checkpoint, tmp_path):
    tokens = tiny_tokens(tmp_path) + [f"extra{i}" for i in range(40)]
    other = save_tokenizer(tmp_path / "bigger", tokens)
    with pytest.raises(ExportError, match=rf"has {len(tokens)} tokens but the encoder's embedding matrix only "
                                          rf"{len(tokens) - 40} rows"):
        to_sentence_transformer(checkpoint, tmp_path / "st", tokenizer=str(other))
    assert not (tmp_path / "st").exists()


def test_tokenizer_with_other_special_token_ids_is_refused(checkpoint, tmp_path):
    """Same size and tokens, [CLS] and [SEP] swapped: every sentence would start with the wrong embedding."""
    tokens = tiny_tokens(tmp_path)
    i, j = tokens.index("[CLS]"), tokens.index("[SEP]")
    tokens[i], tokens[j] = tokens[j], tokens[i]
    swapped = save_tokenizer(tmp_path / "swapped", tokens)
    with pytest.raises(ExportError, match=rf"vocabulary differs .*\(e\.g\. '\[CLS\]': {j} instead of {i}\)"):
        to_sentence_transformer(checkpoint, tmp_path / "st", tokenizer=str(swapped))


def test_tokenizer_object_with_another_padding_id_is_refused(checkpoint, tmp_path):
    """No reference to compare a tokenizer object with: the encoder config's pad_token_id is the check."""
    tokens = tiny_tokens(tmp_path)
    tokens[0], tokens[1] = tokens[1], tokens[0]  # [UNK] first, [PAD] second
    tok = BertTokenizerFast(vocab={t: k for k, t in enumerate(tokens)}, do_lower_case=True)
    with pytest.raises(ExportError, match=r"pad_token_id is 1 but the encoder's config says 0"):
        to_sentence_transformer(checkpoint, tmp_path / "st", tokenizer=tok)


def test_the_models_own_tokenizer_given_explicitly_exports(checkpoint, tiny_bert_dir, tmp_path):
    out = to_sentence_transformer(checkpoint, tmp_path / "st", tokenizer=str(tiny_bert_dir))
    assert (out / "modules.json").is_file()


def test_cli_tokenizer_errors_are_one_line(checkpoint, tmp_path, capsys):
    assert main([str(checkpoint), str(tmp_path / "st"), "--tokenizer", str(tmp_path / "nope")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("hf-cse-export: error: --tokenizer") and "no such folder" in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "st").exists()


def test_a_model_of_an_encoder_saved_without_its_tokenizer_exports_the_tokenizer_given(tiny_roberta_dir, tmp_path):
    """A model trained from a folder of weights only, saved without a tokenizer: transformers loads a stand-in of
    RoBERTa's 5 special tokens from that folder, which the export took as the base encoder's tokenizer (every sentence
    read as <unk>s) and against which it refused the encoder's own tokenizer, given. Now there is none to take, and
    the one given is exported."""
    AutoModel.from_pretrained(tiny_roberta_dir).save_pretrained(tmp_path / "weights_only")
    model = SimCSEModel.from_encoder(str(tmp_path / "weights_only"))
    model.save_pretrained(tmp_path / "ckpt")
    with pytest.raises(ExportError, match=r"no tokenizer found for the export \(tried .*ckpt: ValueError, "
                                          r".*weights_only: no tokenizer files\)\. Pass tokenizer="):
        load_tokenizer(None, tmp_path / "ckpt", model)
    own = AutoTokenizer.from_pretrained(tiny_roberta_dir).get_vocab()
    assert load_tokenizer(str(tiny_roberta_dir), tmp_path / "ckpt", model).get_vocab() == own


def test_a_tokenizer_folder_holding_no_tokenizer_is_refused_as_such(checkpoint, tmp_path):
    BertConfig().save_pretrained(tmp_path / "config_only")
    with pytest.raises(ExportError) as err:
        load_tokenizer(str(tmp_path / "config_only"), checkpoint, SimCSEModel.from_pretrained(checkpoint))
    assert str(err.value) == (
        f"tokenizer {tmp_path / 'config_only'} holds no tokenizer (what transformers loads from it is a stand-in "
        "BertTokenizer of only 5 special token(s)): give a folder holding a saved tokenizer or a Hub id, or leave it "
        "out to use the checkpoint's.")
