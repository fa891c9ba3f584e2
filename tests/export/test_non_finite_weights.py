"""A checkpoint whose weights hold NaN or inf (saved by a run that diverged before its loss stopped it) is refused by
the export and the evaluation when they load it, in one line naming the folder, how many weights are not finite, the
first tensor holding one, and the fix; never exported, never scored ``nan``."""

from __future__ import annotations

import math
import re
import shutil

import pytest
import torch
from transformers import AutoModel, AutoTokenizer

from hf_cse.errors import CSEError
from hf_cse.evaluation import SentenceEncoder
from hf_cse.export import to_sentence_transformer
from hf_cse.models import SimCSEModel


def poison(model, name: str, values=(math.nan, math.inf, -math.inf)) -> None:
    """Set the first elements of the parameter ``name`` to ``values``."""
    with torch.no_grad():
        param = dict(model.named_parameters())[name].view(-1)
        for i, value in enumerate(values):
            param[i] = value


@pytest.fixture
def diverged(tiny_bert_dir, tmp_path):
    """An hf_cse checkpoint with 3 non-finite weights in one tensor (and its tokenizer)."""
    model = SimCSEModel.from_encoder(str(tiny_bert_dir))
    name = next(n for n, _ in model.named_parameters() if n.endswith("query.weight"))
    poison(model, name)
    ckpt = tmp_path / "run" / "checkpoint-4"
    model.save_pretrained(ckpt)
    AutoTokenizer.from_pretrained(str(tiny_bert_dir)).save_pretrained(ckpt)
    return ckpt, name


def check_message(message: str, folder, tensor: str) -> None:
    assert str(folder) in message and "holds 3 of " in message and "not finite (NaN or inf)" in message
    assert re.search(rf"the first in \S*{re.escape(tensor)}: ", message), message
    assert "earlier checkpoint" in message and "lower learning_rate" in message and "\n" not in message


@pytest.mark.slow  # loads and saves models (~1 s)
def test_export_refuses_a_checkpoint_with_non_finite_weights(diverged, tmp_path, capsys):
    ckpt, name = diverged
    out = tmp_path / "st"
    with pytest.raises(CSEError) as err:
        to_sentence_transformer(str(ckpt), out)
    check_message(str(err.value), ckpt, name)
    assert not out.exists() and not list(tmp_path.glob(".st.partial-*"))
    from hf_cse.cli.export import main

    assert main([str(ckpt), str(out)]) == 1
    line = capsys.readouterr().err.strip().splitlines()[-1]  # after transformers' progress bar
    assert line.startswith("hf-cse-export: error: ") and "Traceback" not in line
    check_message(line, ckpt, name)
    assert not out.exists()


@pytest.mark.slow  # loads and saves models (~1 s)
def test_evaluation_refuses_every_model_kind_with_non_finite_weights(diverged, tiny_bert_dir, tmp_path):
    ckpt, name = diverged
    with pytest.raises(CSEError) as err:  # an hf_cse checkpoint
        SentenceEncoder.from_pretrained(str(ckpt), device="cpu", show_progress_bar=False)
    check_message(str(err.value), ckpt, name)

    plain = tmp_path / "plain"  # a plain transformers encoder
    encoder = AutoModel.from_pretrained(str(tiny_bert_dir))
    poison(encoder, "embeddings.word_embeddings.weight")
    encoder.save_pretrained(plain)
    AutoTokenizer.from_pretrained(str(tiny_bert_dir)).save_pretrained(plain)
    with pytest.raises(CSEError) as err:
        SentenceEncoder.from_pretrained(str(plain), device="cpu", show_progress_bar=False)
    check_message(str(err.value), plain, "embeddings.word_embeddings.weight")

    st = tmp_path / "st"  # a sentence-transformers export (of a sound model, then its weights broken)
    to_sentence_transformer(SimCSEModel.from_encoder(str(tiny_bert_dir)), st,
                            tokenizer=AutoTokenizer.from_pretrained(str(tiny_bert_dir)))
    from safetensors.torch import load_file, save_file

    weights = load_file(st / "model.safetensors")
    key = next(k for k in weights if k.endswith("word_embeddings.weight"))
    weights[key].view(-1)[:3] = torch.tensor([math.nan, math.inf, -math.inf])
    save_file(weights, st / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(CSEError) as err:
        SentenceEncoder.from_pretrained(str(st), device="cpu", show_progress_bar=False)
    check_message(str(err.value), st, "word_embeddings.weight")

    shutil.rmtree(st)
    to_sentence_transformer(SimCSEModel.from_encoder(str(tiny_bert_dir)), st,  # a sound model still loads
                            tokenizer=AutoTokenizer.from_pretrained(str(tiny_bert_dir)))
    assert SentenceEncoder.from_pretrained(str(st), device="cpu", show_progress_bar=False).encode(["a b"]).shape[0] == 1
