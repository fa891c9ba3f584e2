"""hf-cse-export --backend onnx (hf_cse.export.onnx): onnx/model.onnx in sentence-transformers' ONNX backend layout,
its embeddings against the PyTorch export's, the int8 variant, and the refusals."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest
import torch
from helpers import random_sentences

from hf_cse.cli import export as export_cli
from hf_cse.export import to_sentence_transformer
from hf_cse.export.errors import ExportError
from hf_cse.export.onnx import INT8_FILE, ONNX_FILE, OnnxEncoder, _pooling_mode, check_onnx_backend
from hf_cse.models import SimCSEModel

pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")


def _min_cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float((np.sum(a * b, 1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))).min())


def _pytorch(folder, sentences):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(folder), device="cpu").encode(sentences)


@pytest.mark.slow
@pytest.mark.parametrize("kind, pooler, normalize", [("bert", "avg", True), ("distilbert", "cls", False),
                                                     ("roberta", "max", False)])
def test_onnx_embeddings_equal_the_pytorch_exports(kind, pooler, normalize, request, tmp_path):
    folder = request.getfixturevalue(f"tiny_{kind}_dir")
    torch.manual_seed(0)
    model = SimCSEModel.from_encoder(str(folder), pooler_type=pooler, normalize=normalize,
                                     prompt="query: " if kind == "bert" else None)
    out = to_sentence_transformer(model, tmp_path / "st", tokenizer=str(folder), backend="onnx", quantize="int8")
    assert (out / ONNX_FILE).is_file() and (out / INT8_FILE).is_file()
    sentences = random_sentences(40, seed=3)  # varied lengths: padding inside the batches
    want = _pytorch(out, sentences)
    got = OnnxEncoder(out).encode(sentences, batch_size=16)
    assert got.shape == want.shape
    assert _min_cosine(got, want) >= 0.9999
    int8 = OnnxEncoder(out, INT8_FILE).encode(sentences)
    assert _min_cosine(int8, want) < 1.0  # a different (quantised) model, still close
    assert _min_cosine(int8, want) > 0.9
    assert "onnx/model.onnx" in (out / "README.md").read_text()
    # truncated as SentenceTransformer(..., truncate_dim=8) is: after the folder's Normalize, then normalised on asking
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(out), device="cpu", truncate_dim=8).encode(sentences, normalize_embeddings=True)
    cut = OnnxEncoder(out).encode(sentences, truncate_dim=8, normalize_embeddings=True)
    assert cut.shape == (40, 8) and _min_cosine(cut, st) >= 0.9999
    np.testing.assert_allclose(np.linalg.norm(cut, axis=1), 1.0, rtol=1e-5)
    np.testing.assert_array_equal(OnnxEncoder(out, truncate_dim=8).encode(sentences), got[:, :8])


@pytest.mark.slow
def test_packaged_minilm_onnx_equals_pytorch(minilm_dir, tmp_path):
    model = SimCSEModel.from_encoder(str(minilm_dir))  # its own mean pooling + Normalize
    out = to_sentence_transformer(model, tmp_path / "st", tokenizer=str(minilm_dir), backend="onnx")
    sentences = random_sentences(24, seed=5) + ["A man is playing a guitar.", "Two dogs run in a field."]
    assert _min_cosine(OnnxEncoder(out).encode(sentences), _pytorch(out, sentences)) >= 0.9999
    inputs = {i.name for i in __import__("onnxruntime").InferenceSession(str(out / ONNX_FILE)).get_inputs()}
    assert inputs == {"input_ids", "attention_mask", "token_type_ids"}  # what optimum's loader feeds a BERT


@pytest.mark.slow
def test_onnx_encoder_truncates_at_the_exports_served_length(tiny_bert_dir, tmp_path):
    """sentence-transformers 6 keeps the served length in tokenizer_config.json, not sentence_bert_config.json:
    OnnxEncoder read 512 and embedded text past it (a different embedding; past the encoder's 64 positions,
    onnxruntime's traceback)."""
    from sentence_transformers import SentenceTransformer

    torch.manual_seed(0)
    model = SimCSEModel.from_encoder(str(tiny_bert_dir), pooler_type="avg")
    out = to_sentence_transformer(model, tmp_path / "st", tokenizer=str(tiny_bert_dir), backend="onnx",
                                  max_seq_length=16)
    st = SentenceTransformer(str(out), device="cpu")
    long = " ".join(random_sentences(12, seed=7))  # well past 16 tokens, and past the encoder's 64 positions
    assert len(st.tokenizer(long)["input_ids"]) > 64
    encoder = OnnxEncoder(out)
    assert encoder.max_length == st.max_seq_length == 16
    sentences = [long, long[:40], "short"]
    np.testing.assert_allclose(encoder.encode(sentences), st.encode(sentences), atol=1e-5)


def test_missing_package_is_one_line_before_any_work(monkeypatch, tmp_path, capsys):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "onnxruntime" else real(name, *a))
    with pytest.raises(ExportError, match=r"pip install 'hf_cse\[onnx\]'"):
        check_onnx_backend("onnx")
    # the command refuses before it reads the (here missing) checkpoint
    assert export_cli.main([str(tmp_path / "no-such-checkpoint"), str(tmp_path / "out"), "--backend", "onnx"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--backend onnx needs onnxruntime" in err[0]
    assert not (tmp_path / "out").exists()


def test_quantize_needs_the_onnx_backend():
    with pytest.raises(ExportError, match=r"^quantize int8 quantises the ONNX model: add backend onnx \(the backend is "
                                          r"torch\)\.$"):
        check_onnx_backend("torch", "int8")
    with pytest.raises(ExportError, match=r"^quantize 'int4': choose one of int8\.$"):
        check_onnx_backend("onnx", "int4")
    check_onnx_backend("torch")  # nothing needed


def test_onnx_encoder_refuses_a_folder_without_its_onnx_model_in_one_line(tmp_path):
    """A torch-only export, a checkpoint folder and a missing folder were onnxruntime's and json's tracebacks."""
    with pytest.raises(ExportError, match="no such folder"):
        OnnxEncoder(tmp_path / "missing")
    with pytest.raises(ExportError, match=r"is not a sentence-transformers export \(no modules.json\)"):
        OnnxEncoder(tmp_path)
    (tmp_path / "modules.json").write_text("[]")
    with pytest.raises(ExportError, match="has no onnx/model.onnx: it was exported without backend onnx"):
        OnnxEncoder(tmp_path)
    with pytest.raises(ExportError, match="truncate_dim must be a whole number >= 1"):
        (tmp_path / "onnx").mkdir()
        (tmp_path / "onnx" / "model.onnx").write_bytes(b"")
        OnnxEncoder(tmp_path, truncate_dim=0)


def test_onnx_encoder_refuses_dense_modules(tmp_path):
    (tmp_path / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"}]))
    with pytest.raises(ExportError, match="also has Dense") as err:
        OnnxEncoder(tmp_path)
    assert "backend='onnx'" not in str(err.value)  # sentence-transformers' ONNX loader needs optimum-onnx


@pytest.mark.parametrize("config, mode", [
    ({"pooling_mode": "mean"}, "mean"), ({"pooling_mode": ["lasttoken"]}, "lasttoken"),
    ({"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False}, "cls"),
    ({"pooling_mode_max_tokens": True}, "max")])
def test_onnx_encoder_reads_the_pooling_configs_forms(config, mode):
    """Both of sentence-transformers' Pooling config forms, read as the training side reads them
    (:func:`hf_cse.encoders.pooling_modes`); the list form was refused."""
    assert _pooling_mode(config) == mode


@pytest.mark.parametrize("config, said", [
    ({"pooling_mode": "weightedmean"}, "'weightedmean'"), ({}, "None"),
    ({"pooling_mode": ["cls", "mean"]}, "'cls\\+mean'"),
    ({"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": True}, "'cls\\+mean'")])
def test_onnx_encoder_refuses_a_pooling_it_does_not_compute(config, said):
    """Several modes (sentence-transformers joins their vectors) were read as the first one's."""
    with pytest.raises(ExportError, match=f"OnnxEncoder pools by cls, mean, max or lasttoken; this folder's Pooling is "
                                          f"{said}"):
        _pooling_mode(config)


@pytest.mark.parametrize("config, keep_projector, flags", [
    ({"pooler_type": "cls", "mlp_only_train": True, "projector": "mlp"}, True,
     "export it without --backend onnx, or without --keep_projector."),
    ({"pooler_type": "cls", "mlp_only_train": False, "projector": "mlp"}, False, "export it without --backend onnx."),
])
def test_onnx_with_a_projection_head_is_refused_before_the_model_loads(config, keep_projector, flags, tmp_path,
                                                                       monkeypatch, capsys):
    """The export wrote an ONNX graph without the head, which OnnxEncoder refused to run and whose other loader
    (sentence-transformers' backend='onnx') does not install beside transformers 5."""
    from hf_cse.export import sentence_transformers as st_export

    checkpoint = tmp_path / "run"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text(json.dumps({"model_type": "hf_cse_simcse", **config}))
    import numpy
    from safetensors.numpy import save_file  # its weights are there: only its config is read
    save_file({"w": numpy.zeros(1, "float32")}, str(checkpoint / "model.safetensors"))
    monkeypatch.setattr(st_export, "load_model", lambda *a: pytest.fail("the model was loaded"))
    with pytest.raises(ExportError, match=r"^backend onnx runs Transformer, Pooling and Normalize modules on ONNX "
                                          r"Runtime, and .* `mlp` projection head \(Dense modules"):
        to_sentence_transformer(checkpoint, tmp_path / "out", backend="onnx", keep_projector=keep_projector)
    argv = [str(checkpoint), str(tmp_path / "out"), "--backend", "onnx"] + (["--keep_projector"] if keep_projector
                                                                           else [])
    assert export_cli.main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and flags in err[0], err
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_the_command_writes_the_onnx_files(tiny_bert_dir, tmp_path):
    from transformers import AutoTokenizer

    checkpoint = tmp_path / "run"
    SimCSEModel.from_encoder(str(tiny_bert_dir), pooler_type="avg").save_pretrained(checkpoint)
    AutoTokenizer.from_pretrained(tiny_bert_dir).save_pretrained(checkpoint)
    out = tmp_path / "st"
    assert export_cli.main([str(checkpoint), str(out), "--backend", "onnx", "--quantize", "int8"]) == 0
    assert (out / ONNX_FILE).is_file() and (out / INT8_FILE).is_file()
    sentences = random_sentences(8, seed=1)
    assert _min_cosine(OnnxEncoder(out).encode(sentences), _pytorch(out, sentences)) >= 0.9999


@pytest.mark.slow
def test_an_overwrite_without_onnx_drops_the_earlier_exports_onnx_model(tiny_bert_dir, tmp_path):
    """The ONNX folder of the export it replaces was kept as a file no export writes: SentenceTransformer(backend=
    "onnx") then loaded the earlier model beside the new weights."""
    torch.manual_seed(0)
    first = SimCSEModel.from_encoder(str(tiny_bert_dir))
    out = to_sentence_transformer(first, tmp_path / "st", tokenizer=str(tiny_bert_dir), backend="onnx")
    (out / "notes.txt").write_text("mine")
    second = SimCSEModel.from_encoder(str(tiny_bert_dir), pooler_type="avg")
    out = to_sentence_transformer(second, tmp_path / "st", tokenizer=str(tiny_bert_dir), overwrite=True)
    assert not (out / "onnx").exists() and (out / "notes.txt").read_text() == "mine"
