"""Export to sentence-transformers, model cards and Hub pushing (hf_cse.export, hf_cse.model_card)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch
import yaml
from sentence_transformers import SentenceTransformer
from transformers import AutoModel, AutoTokenizer, TrainingArguments

from hf_cse.export import (
    ExportError,
    HubPushError,
    push_export,
    to_sentence_transformer,
    training_info_from_run,
)
from hf_cse.model_card import ModelCardError, card_metadata
from hf_cse.models import METHODS, SimCSEModel

RESULTS = {"STS12": 68.41, "STS13": 82.37, "STS14": 74.28, "STS15": 80.91, "STS16": 78.56, "STSBenchmark": 76.85,
           "SICKRelatedness": 72.23, "avg": 76.23, "MR": 81.18, "CR": 86.46, "SUBJ": 94.45, "MPQA": 88.88,
           "SST2": 85.5, "TREC": 89.8, "MRPC": 74.43, "transfer_avg": 85.81}


# --------------------------------------------------------------------------------------------- helpers
def reference(model, tokenizer, sentences, pooler=None, with_projector=False):
    """hf_cse's own test-time embeddings (eval mode)."""
    model.eval()
    batch = tokenizer(sentences, padding=True, truncation=True, return_tensors="pt")
    with torch.no_grad():
        emb = model.sentence_embedding(batch["input_ids"], batch["attention_mask"], batch.get("token_type_ids"),
                                       pooler=pooler)
        return model.projector(emb) if with_projector else emb


def encode_export(folder, sentences):
    return SentenceTransformer(str(folder), device="cpu").encode(sentences, convert_to_tensor=True).cpu()


def assert_same_vectors(got, want):
    assert got.shape == want.shape
    cos = torch.nn.functional.cosine_similarity(got, want, dim=-1)
    assert cos.min().item() >= 0.99999, cos
    torch.testing.assert_close(got, want.float(), atol=1e-4, rtol=1e-4)


def assert_no_placeholders(card: str):
    assert "{{" not in card and "}}" not in card
    assert "TODO" not in card
    assert not re.search(r"\bNone\b", card), [line for line in card.splitlines() if "None" in line]


def module_types(folder):
    return [m["type"].rsplit(".", 1)[-1] for m in json.loads((Path(folder) / "modules.json").read_text())]


def randomize_projector(model, seed=0):
    """Non-trivial head weights and BatchNorm statistics (fresh ones are close to identity/zero)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, buf in model.projector.named_buffers():
            if "running_mean" in name:
                buf.copy_(torch.randn(buf.shape, generator=g) * 0.3)
            elif "running_var" in name:
                buf.copy_(torch.rand(buf.shape, generator=g) + 0.5)
        for p in model.projector.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.2)


@pytest.fixture
def tok(tiny_bert_dir):
    return AutoTokenizer.from_pretrained(tiny_bert_dir)


# --------------------------------------------------------------------------------------------- fidelity
@pytest.mark.parametrize("kind,max_len", [("bert", 64), ("roberta", 78), ("distilbert", 64)])
def test_simcse_export_matches_hf_cse_embeddings(kind, max_len, request, tmp_path, sentences):
    folder = request.getfixturevalue(f"tiny_{kind}_dir")
    model = SimCSEModel.from_encoder(str(folder))
    out = to_sentence_transformer(model, tmp_path / "st", tokenizer=str(folder))

    assert module_types(out) == ["Transformer", "Pooling"]  # the training-only MLP is left out
    assert json.loads((out / "1_Pooling" / "config.json").read_text())["pooling_mode"] == "cls"
    st = SentenceTransformer(str(out), device="cpu")
    assert st.max_seq_length == max_len  # the encoder's limit (RoBERTa: 80 positions - offset 2), not 32
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert_same_vectors(encode_export(out, sentences), reference(model, tokenizer, sentences))
    # BERT/RoBERTa's pooler layer, which hf_cse trains without, is shipped with fixed weights, not random ones
    # (tests/export/test_export_resave.py: the loads and a re-saved copy)
    for name, weight in st[0].auto_model.named_parameters():
        if "pooler" in name:
            torch.testing.assert_close(weight, torch.eye(32) if weight.dim() == 2 else torch.zeros(32), msg=name)


def test_mean_pooling_model_exports_mean_pooling(tiny_bert_dir, tok, tmp_path, sentences):
    model = SimCSEModel.from_encoder(str(tiny_bert_dir), pooler_type="avg")
    out = to_sentence_transformer(model, tmp_path / "st", tokenizer=tok)
    assert json.loads((out / "1_Pooling" / "config.json").read_text())["pooling_mode"] == "mean"
    assert_same_vectors(encode_export(out, sentences), reference(model, tok, sentences))


@pytest.mark.parametrize("pooler", ["avg_first_last", "avg_top2"])
def test_layer_mixing_poolers_are_refused_clearly(pooler, tiny_bert_dir, tok, tmp_path):
    model = SimCSEModel.from_encoder(str(tiny_bert_dir), pooler_type=pooler)
    with pytest.raises(ExportError, match=f"{pooler}.*pooler_type cls, avg or max"):
        to_sentence_transformer(model, tmp_path / "st", tokenizer=tok)
    assert not (tmp_path / "st").exists() and list(tmp_path.iterdir()) == []


def test_keep_projector_exports_the_mlp_as_dense_tanh(tiny_bert_dir, tok, tmp_path, sentences):
    model = SimCSEModel.from_encoder(str(tiny_bert_dir))
    randomize_projector(model)
    out = to_sentence_transformer(model, tmp_path / "st", tokenizer=tok, keep_projector=True)
    assert module_types(out) == ["Transformer", "Pooling", "Dense"]
    dense_cfg = json.loads((out / "2_Dense" / "config.json").read_text())
    assert dense_cfg["activation_function"].endswith("Tanh")
    # = SimCSE's "cls" embedding: MLP on [CLS]
    assert_same_vectors(encode_export(out, sentences), reference(model, tok, sentences, pooler="cls"))
    assert "Projection head kept" in (out / "README.md").read_text()


def test_head_used_at_test_time_is_always_exported(tiny_bert_dir, tok, tmp_path, sentences):
    model = SimCSEModel.from_encoder(str(tiny_bert_dir), mlp_only_train=False)  # test pooler = "cls" (MLP on)
    randomize_projector(model)
    out = to_sentence_transformer(model, tmp_path / "st", tokenizer=tok)
    assert module_types(out) == ["Transformer", "Pooling", "Dense"]
    assert_same_vectors(encode_export(out, sentences), reference(model, tok, sentences))


@pytest.mark.parametrize("projector,n_dense", [("linear", 1), ("batchnorm", 2)])
def test_linear_and_batchnorm_heads_are_exported_exactly(projector, n_dense, tiny_bert_dir, tok, tmp_path, sentences):
    model = SimCSEModel.from_encoder(str(tiny_bert_dir), projector=projector)
    randomize_projector(model)
    out = to_sentence_transformer(model, tmp_path / "st", tokenizer=tok, keep_projector=True)
    assert module_types(out) == ["Transformer", "Pooling"] + ["Dense"] * n_dense
    want = reference(model, tok, sentences, with_projector=True)  # eval-mode BatchNorm = running statistics
    assert_same_vectors(encode_export(out, sentences), want)


def test_batchnorm_head_without_running_statistics_is_refused(tiny_bert_dir, tok, tmp_path):
    model = SimCSEModel.from_encoder(str(tiny_bert_dir), projector="batchnorm")
    for bn in (model.projector.net[1], model.projector.net[4]):
        bn.running_mean = bn.running_var = None
    with pytest.raises(ExportError, match="no running statistics"):
        to_sentence_transformer(model, tmp_path / "st", tokenizer=tok, keep_projector=True)
    assert not (tmp_path / "st").exists()


def test_keep_projector_without_a_projector_is_an_error(tiny_bert_dir, tok, tmp_path):
    model = SimCSEModel.from_encoder(str(tiny_bert_dir), projector="none")
    with pytest.raises(ExportError, match="no projection head"):
        to_sentence_transformer(model, tmp_path / "st", tokenizer=tok, keep_projector=True)


@pytest.mark.skipif("diffcse" not in METHODS, reason="DiffCSE model not available")
def test_diffcse_export_has_only_the_encoder(tiny_bert_dir, tok, tmp_path, sentences):
    from safetensors import safe_open

    model = METHODS["diffcse"].from_encoder(str(tiny_bert_dir))
    out = to_sentence_transformer(model, tmp_path / "st", tokenizer=tok)
    assert module_types(out) == ["Transformer", "Pooling"]  # BatchNorm projector: training only
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        keys = set(f.keys())
    # no discriminator, RTD head or generator weights; the pooler layer every BERT load builds (fixed weights)
    assert keys == set(model.encoder.state_dict()) | {"pooler.dense.weight", "pooler.dense.bias"}
    assert_same_vectors(encode_export(out, sentences), reference(model, tok, sentences))
    card = (out / "README.md").read_text()
    assert "DiffCSE: Difference-based Contrastive Learning" in card and "lambda_rtd" in card
    assert_no_placeholders(card)


@pytest.mark.skipif("imsimcse" not in METHODS, reason="ImSimCSE model not available")
def test_imsimcse_export(tiny_bert_dir, tok, tmp_path, sentences):
    model = METHODS["imsimcse"].from_encoder(str(tiny_bert_dir))
    out = to_sentence_transformer(model, tmp_path / "st", tokenizer=tok)
    assert_same_vectors(encode_export(out, sentences), reference(model, tok, sentences))
    card = (out / "README.md").read_text()
    assert "ImSimCSE" in card and "off_dropout_infonce" in card and "dimension-wise" in card
    assert_no_placeholders(card)


@pytest.mark.slow
def test_packaged_minilm_export(minilm_dir, tmp_path, sentences):
    model = SimCSEModel.from_encoder(str(minilm_dir))
    out = to_sentence_transformer(model, tmp_path / "st")  # tokenizer found through config.base_encoder
    st = SentenceTransformer(str(out), device="cpu")
    assert st.max_seq_length == 256 and st.get_embedding_dimension() == 384  # as the encoder was served
    tokenizer = AutoTokenizer.from_pretrained(minilm_dir)
    assert_same_vectors(encode_export(out, sentences), reference(model, tokenizer, sentences))
    meta = card_metadata((out / "README.md").read_text())
    assert meta["base_model"] == "sentence-transformers/all-MiniLM-L6-v2"
    # nothing machine-local is published: local paths became the Hub id
    assert str(minilm_dir) not in "".join(p.read_text() for p in out.rglob("*.json"))
    published = json.loads((out / "hf_cse_config.json").read_text())
    assert (published["base_encoder"], published["base_encoder_local"]) == (meta["base_model"], False)


def test_max_seq_length_can_be_lowered_but_not_above_the_encoder_limit(tiny_bert_dir, tok, tmp_path):
    model = SimCSEModel.from_encoder(str(tiny_bert_dir))
    out = to_sentence_transformer(model, tmp_path / "st", tokenizer=tok, max_seq_length=16)
    assert SentenceTransformer(str(out), device="cpu").max_seq_length == 16
    assert "longer than 16 tokens are truncated" in (out / "README.md").read_text()
    with pytest.raises(ExportError, match=r"max_seq_length 100 exceeds what the encoder .* takes \(64 positions\)"):
        to_sentence_transformer(model, tmp_path / "st2", tokenizer=tok, max_seq_length=100)


def test_a_sentence_transformers_encoders_own_length_is_the_default_of_the_export_and_the_evaluation(
        tiny_bert_dir, tok, tmp_path):
    """all-MiniLM-L6-v2 is served with max_seq_length 256 of its 512 positions; its trained export said 512, so the
    shipped model read text its encoder was never served. A plain encoder keeps its position limit (64 here)."""
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer

    from hf_cse.encoders import own_max_seq_length
    from hf_cse.evaluation import SentenceEncoder

    transformer = Transformer(str(tiny_bert_dir), max_seq_length=20)
    SentenceTransformer(modules=[transformer, Pooling(transformer.get_embedding_dimension(), "mean")],
                        device="cpu").save(str(tmp_path / "encoder"))
    served = SimCSEModel.from_encoder(str(tmp_path / "encoder"))
    plain = SimCSEModel.from_encoder(str(tiny_bert_dir))
    assert (served.config.encoder_max_seq_length, plain.config.encoder_max_seq_length) == (20, None)
    for model, length in ((served, 20), (plain, 64)):
        out = to_sentence_transformer(model, tmp_path / f"st{length}", tokenizer=tok)
        assert SentenceTransformer(str(out), device="cpu").max_seq_length == length
        assert SentenceEncoder(model, tok).max_length == length
    served.save_pretrained(tmp_path / "run")  # a checkpoint keeps it
    assert SimCSEModel.from_pretrained(tmp_path / "run").config.encoder_max_seq_length == 20
    # sentence-transformers before 6 kept it in sentence_bert_config.json (all-MiniLM-L6-v2's 256)
    (tmp_path / "encoder" / "sentence_bert_config.json").write_text('{"max_seq_length": 24}')
    assert own_max_seq_length(str(tmp_path / "encoder")) == 24


def test_the_served_length_is_capped_at_the_encoders_positions_as_sentence_transformers_caps_it(tmp_path):
    """sentence-transformers 6.2 serves min(tokenizer model_max_length, max_position_embeddings) when
    sentence_bert_config.json names no max_seq_length; a tokenizer saved without a length names none."""
    from hf_cse.encoders import own_max_seq_length

    (tmp_path / "modules.json").write_text(json.dumps([{"idx": 0, "name": "0", "path": "",
                                                        "type": "sentence_transformers.models.Transformer"}]))
    (tmp_path / "sentence_bert_config.json").write_text('{"transformer_task": "feature-extraction"}')
    (tmp_path / "config.json").write_text('{"model_type": "bert", "max_position_embeddings": 64}')
    (tmp_path / "tokenizer_config.json").write_text('{"model_max_length": 512}')
    assert own_max_seq_length(str(tmp_path)) == 64
    (tmp_path / "tokenizer_config.json").write_text('{"model_max_length": 48}')
    assert own_max_seq_length(str(tmp_path)) == 48
    (tmp_path / "tokenizer_config.json").write_text('{"model_max_length": 1000000000000000019884624838656}')
    assert own_max_seq_length(str(tmp_path)) is None


def test_round_trip_save_export_load_gives_identical_vectors(tiny_bert_dir, tok, tmp_path, sentences):
    model = SimCSEModel.from_encoder(str(tiny_bert_dir))
    model.save_pretrained(tmp_path / "ckpt")
    tok.save_pretrained(tmp_path / "ckpt")
    out = to_sentence_transformer(str(tmp_path / "ckpt"), tmp_path / "st")
    got = encode_export(out, sentences)
    want = reference(model, tok, sentences)
    assert_same_vectors(got, want)
    assert torch.allclose(got, want, atol=1e-6)


# --------------------------------------------------------------------------------------------- model card
def test_card_has_the_runs_hyperparameters_scores_and_valid_yaml(tiny_bert_dir, tok, tmp_path):
    model = SimCSEModel.from_encoder(str(tiny_bert_dir), loss="gs_infonce",
                                     loss_kwargs={"temperature": 0.05, "num_noise": 192}, dropout=0.2)
    args = TrainingArguments(output_dir=str(tmp_path / "secret_out"), learning_rate=3e-5,
                             per_device_train_batch_size=64, num_train_epochs=1, seed=42, report_to="none",
                             hub_token="hf_SECRET_TOKEN", use_cpu=True)
    info = training_info_from_run(args, data={"source": "wiki1m_for_simcse.txt", "num_sentences": 1000000,
                                              "max_seq_length": 32}, train_metrics={"train_loss": 0.0123},
                                  preset="gs_infonce_bert")
    results = tmp_path / "results.json"  # as run_eval.py writes it: scores plus details, settings and timing
    results.write_text(json.dumps({**RESULTS, "alignment": 0.2134, "uniformity": -2.31, "model": "/secret_dir/ckpt",
                                   "details": {"sts": {"STS12": {"all": {"spearman": 68.41}}}}, "timing": {"sts": 9.5},
                                   "settings": {"mode": "test", "sts_aggregation": "all", "model": "/secret_dir/ckpt",
                                                "pooler": "cls_before_pooler"}}))
    out = to_sentence_transformer(model, tmp_path / "st", tokenizer=tok, eval_results=results, training_info=info,
                                  repo_id="someone/gs-infonce-tiny")
    card = (out / "README.md").read_text()
    assert_no_placeholders(card)
    # method, paper and loss with every hyperparameter (given and default)
    assert "Smoothed Contrastive Learning for Unsupervised Sentence Embedding" in card
    assert "@inproceedings{wu2022gsinfonce" in card and "@inproceedings{gao2021simcse" in card
    for text in ("| `num_noise` | 192 |", "| `temperature` | 0.05 |", "| `lam` |", "| `dropout` | 0.2 |"):
        assert text in card, text
    # training arguments and data
    for text in ("| `learning_rate` | 3e-05 |", "| `per_device_train_batch_size` | 64 |", "| `seed` | 42 |",
                 "wiki1m_for_simcse.txt", "1,000,000", "32 tokens", "gs_infonce_bert", "| `train_loss` | 0.0123 |"):
        assert text in card, text
    assert "hf_SECRET_TOKEN" not in card and "secret_out" not in card
    # scores
    assert "| 68.41 | 82.37 | 74.28 | 80.91 | 78.56 | 76.85 | 72.23 | 76.23 |" in card
    assert "| 81.18 | 86.46 | 94.45 | 88.88 | 85.50 | 89.80 | 74.43 | 85.81 |" in card
    assert "| `alignment` | 0.2134 |" in card and "| `uniformity` | -2.3100 |" in card and "9.5" not in card
    assert "mode = test, sts_aggregation = all, pooler = cls_before_pooler" in card and "secret_dir" not in card
    assert 'SentenceTransformer("someone/gs-infonce-tiny")' in card
    assert "| transformers |" in card and "| sentence-transformers |" in card and "| hf_cse |" in card
    meta = card_metadata(card)
    assert meta["library_name"] == "sentence-transformers" and meta["pipeline_tag"] == "sentence-similarity"
    assert {"sentence-transformers", "gs_infonce", "simcse"} <= set(meta["tags"])
    assert "base_model" not in meta  # a local encoder has no Hub id
    index = meta["model-index"][0]
    assert index["name"] == "someone/gs-infonce-tiny"
    scores = {r["dataset"]["name"]: r["metrics"][0]["value"] for r in index["results"]}
    assert scores["STSBenchmark"] == 76.85 and scores["SentEval MR"] == 81.18 and len(scores) == 14


def test_card_without_training_info_or_results_still_has_no_placeholders(tiny_bert_dir, tok, tmp_path):
    model = SimCSEModel.from_encoder(str(tiny_bert_dir))
    card = (to_sentence_transformer(model, tmp_path / "st", tokenizer=tok) / "README.md").read_text()
    assert_no_placeholders(card)
    assert "No evaluation results were attached" in card and "model-index" not in card
    assert isinstance(yaml.safe_load(card.split("---")[1]), dict)


def test_bad_results_file_fails_before_writing(tiny_bert_dir, tok, tmp_path):
    model = SimCSEModel.from_encoder(str(tiny_bert_dir))
    with pytest.raises(FileNotFoundError, match="results.json"):
        to_sentence_transformer(model, tmp_path / "st", tokenizer=tok, eval_results=tmp_path / "missing.json")
    with pytest.raises(ModelCardError, match="several models"):
        to_sentence_transformer(model, tmp_path / "st", tokenizer=tok, eval_results={"models": [RESULTS, RESULTS]})
    assert not (tmp_path / "st").exists()


@pytest.mark.parametrize("keep_projector,pooler,taken", [
    (False, "cls_before_pooler", True), (False, "avg", False), (False, "cls", False),
    (True, "cls", True), (True, "cls_before_pooler", False)])
def test_results_of_another_embedding_than_the_export_ships_are_refused(tiny_bert_dir, tok, tmp_path, keep_projector,
                                                                         pooler, taken):
    """run_eval.py's pooler setting must be the exported embedding's (the card's 'embeddings = ...' line and the Hub
    model-index claim the scores for it); results of run_eval.py --pooler avg were shown as the CLS export's."""
    model = SimCSEModel.from_encoder(str(tiny_bert_dir))  # test embedding: cls_before_pooler (the MLP: training only)
    results = {"STSBenchmark": 76.85, "avg": 76.85, "settings": {"pooler": pooler, "kind": "hf_cse"}}
    if taken:
        out = to_sentence_transformer(model, tmp_path / "st", tokenizer=tok, eval_results=results,
                                      keep_projector=keep_projector)
        assert "76.85" in (out / "README.md").read_text()
        return
    with pytest.raises(ExportError, match=rf"pooler '{pooler}'; the card would show them for the export's '"):
        to_sentence_transformer(model, tmp_path / "st", tokenizer=tok, eval_results=results,
                                keep_projector=keep_projector)
    assert not (tmp_path / "st").exists()


# --------------------------------------------------------------------------------------------- overwrite safety
def test_non_empty_folder_needs_overwrite_and_is_left_untouched(tiny_bert_dir, tok, tmp_path):
    model = SimCSEModel.from_encoder(str(tiny_bert_dir))
    out = tmp_path / "st"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="not empty.*overwrite"):
        to_sentence_transformer(model, out, tokenizer=tok)
    assert [p.name for p in out.iterdir()] == ["keep.txt"] and (out / "keep.txt").read_text() == "mine"
    to_sentence_transformer(model, out, tokenizer=tok, overwrite=True)  # replaces export files only
    assert (out / "modules.json").is_file() and (out / "keep.txt").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["st"]  # no temp or backup folders left


def test_failure_mid_export_leaves_no_folder(tiny_bert_dir, tok, tmp_path, monkeypatch):
    import hf_cse.export.sentence_transformers as export  # where to_sentence_transformer looks the name up

    def broken(*args, **kwargs):
        raise RuntimeError("card rendering broke")

    monkeypatch.setattr(export, "render_model_card", broken)
    model = SimCSEModel.from_encoder(str(tiny_bert_dir))
    with pytest.raises(RuntimeError, match="card rendering broke"):
        to_sentence_transformer(model, tmp_path / "new" / "nested" / "st", tokenizer=tok)
    assert list(tmp_path.iterdir()) == []  # neither the folder, its temp copy nor the parents it created
    # an existing export survives a failed overwrite
    (tmp_path / "st").mkdir()
    (tmp_path / "st" / "old.txt").write_text("old")
    with pytest.raises(RuntimeError):
        to_sentence_transformer(model, tmp_path / "st", tokenizer=tok, overwrite=True)
    assert [p.name for p in tmp_path.iterdir()] == ["st"] and (tmp_path / "st" / "old.txt").read_text() == "old"


def test_exporting_over_the_checkpoint_itself_is_refused(tiny_bert_dir, tok, tmp_path):
    SimCSEModel.from_encoder(str(tiny_bert_dir)).save_pretrained(tmp_path / "ckpt")
    with pytest.raises(ExportError, match="would replace it"):
        to_sentence_transformer(str(tmp_path / "ckpt"), tmp_path / "ckpt", tokenizer=tok, overwrite=True)
    assert (tmp_path / "ckpt" / "config.json").is_file()


# --------------------------------------------------------------------------------------------- hub
@pytest.fixture
def exported(tiny_bert_dir, tok, tmp_path):
    return to_sentence_transformer(SimCSEModel.from_encoder(str(tiny_bert_dir)), tmp_path / "st", tokenizer=tok)


class FakeRepoUrl(str):
    def __new__(cls, repo_id):
        obj = super().__new__(cls, f"https://huggingface.co/{repo_id}")
        obj.repo_id = repo_id
        return obj


@pytest.fixture
def hub_on(monkeypatch):
    """The Hub counts as switched on and reachable (the tests' environment switches it off, and the machine running
    them may have no network): each test replaces the HfApi calls a push makes."""
    from huggingface_hub import constants

    from hf_cse import hub_reach

    monkeypatch.setattr(hub_reach, "hub_unreachable", lambda: None)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)


@pytest.fixture
def fake_hub(monkeypatch, tmp_path, hub_on):
    """HfApi.create_repo / upload_folder replaced by recorders: no network. Uploaded folders are copied."""
    from huggingface_hub import HfApi

    calls = {"create_repo": [], "create_branch": [], "upload_folder": []}

    def create_repo(self, repo_id, **kwargs):
        calls["create_repo"].append((repo_id, kwargs))
        return FakeRepoUrl(repo_id)

    def create_branch(self, repo_id, *, branch, **kwargs):
        calls["create_branch"].append((repo_id, branch, kwargs))

    def upload_folder(self, *, repo_id, folder_path, **kwargs):
        from huggingface_hub.utils import filter_repo_objects

        copy = tmp_path / "uploaded" / repo_id.replace("/", "--")
        files = [p.relative_to(folder_path).as_posix() for p in Path(folder_path).rglob("*") if p.is_file()]
        for name in filter_repo_objects(files, allow_patterns=kwargs.get("allow_patterns"),
                                        ignore_patterns=kwargs.get("ignore_patterns")):  # what the client uploads
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(Path(folder_path) / name, copy / name)
        calls["upload_folder"].append((repo_id, copy, kwargs))

    monkeypatch.setattr(HfApi, "create_repo", create_repo)
    monkeypatch.setattr(HfApi, "create_branch", create_branch)
    monkeypatch.setattr(HfApi, "upload_folder", upload_folder)
    return calls


def test_push_export_uploads_a_loadable_folder(exported, fake_hub, sentences):
    url = push_export(exported, "someone/tiny-simcse", private=True)
    assert url == "https://huggingface.co/someone/tiny-simcse"
    assert fake_hub["create_repo"] == [("someone/tiny-simcse", {"token": None, "private": True, "exist_ok": True})]
    [(repo, folder, kwargs)] = fake_hub["upload_folder"]
    assert repo == "someone/tiny-simcse" and kwargs["repo_type"] == "model"
    assert_same_vectors(encode_export(folder, sentences), encode_export(exported, sentences))
    assert 'SentenceTransformer("someone/tiny-simcse")' in (folder / "README.md").read_text()


def test_a_push_to_a_revision_commits_to_that_branch(exported, fake_hub):
    """TrainingArguments.hub_revision names the branch a push goes to; the export was pushed to the default branch
    whatever it said."""
    url = push_export(exported, "someone/tiny-simcse", revision="dev")
    assert url == "https://huggingface.co/someone/tiny-simcse/tree/dev"
    assert [(repo, branch, kwargs["exist_ok"]) for repo, branch, kwargs in fake_hub["create_branch"]] == \
        [("someone/tiny-simcse", "dev", True)]
    [(_, uploaded, kwargs)] = fake_hub["upload_folder"]
    assert kwargs["revision"] == "dev"  # and the card's snippet loads that branch
    assert 'SentenceTransformer("someone/tiny-simcse", revision="dev")' in (uploaded / "README.md").read_text()
    push_export(exported, "someone/tiny-simcse")  # the default branch: no branch made, the card loads it
    assert len(fake_hub["create_branch"]) == 1 and fake_hub["upload_folder"][1][2]["revision"] is None
    assert 'SentenceTransformer("someone/tiny-simcse")' in (uploaded / "README.md").read_text()


def test_a_push_uploads_the_exports_files_and_replaces_an_earlier_exports_in_the_repo(exported, fake_hub):
    """A user's file kept in the export folder is not uploaded; in the repo, what an earlier export left and this one
    does not write (a stale ONNX model would serve other weights, a head module) is deleted in the same commit, and
    the repo's other files stay."""
    from huggingface_hub.utils import filter_repo_objects

    (exported / "notes.txt").write_text("mine")
    push_export(exported, "someone/tiny-simcse")
    [(_, uploaded, kwargs)] = fake_hub["upload_folder"]
    assert not (uploaded / "notes.txt").exists() and (uploaded / "modules.json").is_file()
    kept_local = ("notes.txt", "hf_cse_card_inputs.json")
    assert sorted(p.name for p in uploaded.iterdir()) == sorted(p.name for p in exported.iterdir()
                                                                if p.name not in kept_local)
    remote = ["onnx/model.onnx", "3_Dense/config.json", "vocab.txt", "handler.py", ".gitattributes", "LICENSE"]
    deleted = list(filter_repo_objects(remote, allow_patterns=kwargs["delete_patterns"]))
    assert deleted == ["onnx/model.onnx", "3_Dense/config.json", "vocab.txt"], deleted


def test_push_renders_the_card_for_the_repo_from_the_recorded_inputs(tiny_bert_dir, tok, tmp_path, fake_hub):
    from hf_cse.export import CARD_INPUTS_FILE

    model = SimCSEModel.from_encoder(str(tiny_bert_dir))
    info = {"data": {"source": "demo.txt", "num_sentences": 321},
            "training_args": {"learning_rate": 7e-06, "output_dir": str(tmp_path / "run")}}
    made_for_repo = to_sentence_transformer(model, tmp_path / "for-repo", tokenizer=tok, eval_results=RESULTS,
                                            training_info=info, repo_id="someone/tiny-simcse")
    local = to_sentence_transformer(model, tmp_path / "local", tokenizer=tok, eval_results=RESULTS, training_info=info)
    assert "someone/tiny-simcse" not in (local / "README.md").read_text()
    push_export(local, "someone/tiny-simcse")
    [(_, uploaded, kwargs)] = fake_hub["upload_folder"]
    # the pushed card is the one an export made for the repo gets: rendered again, not patched
    assert (uploaded / "README.md").read_text() == (made_for_repo / "README.md").read_text()
    assert (local / "README.md").read_text() == (made_for_repo / "README.md").read_text()
    assert kwargs["ignore_patterns"] == [CARD_INPUTS_FILE]  # the record stays local
    # the record holds nothing machine-local either (the run's output_dir became its name)
    assert str(tmp_path) not in (local / CARD_INPUTS_FILE).read_text()


def test_push_of_an_export_without_recorded_card_inputs_uploads_it_as_it_is(exported, fake_hub):
    from hf_cse.export import CARD_INPUTS_FILE

    (exported / CARD_INPUTS_FILE).unlink()  # as an export made before the record was kept
    card = (exported / "README.md").read_text()
    push_export(exported, "someone/tiny-simcse")
    [(_, uploaded, _)] = fake_hub["upload_folder"]
    assert (uploaded / "README.md").read_text() == card


def test_a_malformed_repo_id_is_refused_before_any_work(exported, fake_hub, tiny_bert_dir, tmp_path, capsys):
    """``--push_to_hub "not a repo/x y"`` was refused by the Hub client after the whole export was written; training
    to a folder whose name is no repo id (the push's default repo) would have failed after training."""
    from transformers import TrainingArguments

    from hf_cse.cli.export import main as export_main
    from hf_cse.export.hub import take_over_hub_push

    line = r"'not a repo/x y' is no Hub repo id \(Repo id must use alphanumeric chars.*\); use one like 'username/"
    with pytest.raises(HubPushError, match="^repo_id " + line):
        push_export(exported, "not a repo/x y")
    assert fake_hub["create_repo"] == []
    SimCSEModel.from_encoder(str(tiny_bert_dir)).save_pretrained(tmp_path / "ckpt")
    assert export_main([str(tmp_path / "ckpt"), str(tmp_path / "new"), "--push_to_hub", "not a repo/x y"]) == 1
    assert re.search("--push_to_hub " + line, capsys.readouterr().err) and not (tmp_path / "new").exists()
    args = TrainingArguments(output_dir=str(tmp_path / "my run"), push_to_hub=True, report_to="none")
    with pytest.raises(HubPushError, match=r"^push_to_hub: the output folder's name 'my run' is no Hub repo id"):
        take_over_hub_push(args)
    args = TrainingArguments(output_dir=str(tmp_path / "run"), push_to_hub=True, report_to="none",
                             hub_model_id="me/run", hub_revision="0123456789abcdef0123456789abcdef01234567")
    with pytest.raises(HubPushError, match=r"^hub_revision '0123456789.*' is a commit id, .* name a branch") as raised:
        take_over_hub_push(args)  # a commit id would have been made a branch's name
    assert raised.value.fields == ("hub_revision",)


def test_push_offline_gives_a_clear_error(exported, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(HubPushError, match="the Hub is offline \\(HF_HUB_OFFLINE"):
        push_export(exported, "someone/tiny-simcse")


def test_push_unauthenticated_gives_a_clear_error(exported, monkeypatch, hub_on):
    from huggingface_hub import HfApi
    from huggingface_hub.errors import LocalTokenNotFoundError

    def no_token(self, *args, **kwargs):
        raise LocalTokenNotFoundError("Token is required")

    monkeypatch.setattr(HfApi, "create_repo", no_token)
    with pytest.raises(HubPushError, match="huggingface-cli login.*HF_TOKEN"):
        push_export(exported, "someone/tiny-simcse")


def test_a_push_the_network_fails_is_one_error_that_says_the_export_is_kept(exported, monkeypatch, hub_on):
    """huggingface_hub's HTTP client raises its own errors for a failed connection (httpx2.ConnectError: no OSError);
    the push names the failure, that the export is kept, and how to upload it later."""
    import httpx2
    from huggingface_hub import HfApi

    def unreachable(self, *args, **kwargs):
        raise httpx2.ConnectError("[Errno -2] Name or service not known")

    monkeypatch.setattr(HfApi, "create_repo", unreachable)
    with pytest.raises(HubPushError, match=r"cannot push to someone/tiny-simcse: ConnectError: \[Errno -2\] Name or "
                                           r"service not known\. The export is kept in .*`hf upload someone/tiny"):
        push_export(exported, "someone/tiny-simcse")


def test_push_needs_an_export_folder(tmp_path):
    with pytest.raises(ExportError, match="no modules.json"):
        push_export(tmp_path, "someone/x")


def test_hf_cse_model_push_to_hub_uploads_a_reloadable_checkpoint(tiny_bert_dir, monkeypatch, tmp_path, sentences):
    import transformers.utils.hub as hf_hub
    from huggingface_hub import HfApi, ModelCard

    uploaded = tmp_path / "uploaded"

    def create_commit(self, *, repo_id, operations, **kwargs):
        for op in operations:
            target = uploaded / op.path_in_repo
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(op.path_or_fileobj, target)

    monkeypatch.setattr(HfApi, "create_repo", lambda self, repo_id, **kw: FakeRepoUrl(repo_id))
    monkeypatch.setattr(HfApi, "create_commit", create_commit)
    monkeypatch.setattr(hf_hub, "create_and_tag_model_card", lambda *a, **k: ModelCard("---\n---\ncard"))
    model = SimCSEModel.from_encoder(str(tiny_bert_dir))
    model.push_to_hub("someone/tiny-simcse-checkpoint")
    reloaded = AutoModel.from_pretrained(uploaded)  # hf_cse is imported: its classes are registered
    assert type(reloaded) is SimCSEModel
    for (name, a), b in zip(model.state_dict().items(), reloaded.state_dict().values()):
        assert torch.equal(a, b), name


# --------------------------------------------------------------------------------------------- CLI
def test_cli_exports_a_saved_checkpoint_with_its_training_info(tiny_bert_dir, tok, tmp_path, capsys):
    from hf_cse.cli.export import main
    from hf_cse.export import TRAINING_INFO_FILE

    ckpt = tmp_path / "ckpt"
    SimCSEModel.from_encoder(str(tiny_bert_dir)).save_pretrained(ckpt)
    tok.save_pretrained(ckpt)
    (ckpt / TRAINING_INFO_FILE).write_text(json.dumps({"data": {"source": "demo.txt", "num_sentences": 321},
                                                        "training_args": {"learning_rate": 7e-06}}))
    (tmp_path / "results.json").write_text(json.dumps(RESULTS))
    out = tmp_path / "st"
    assert main([str(ckpt), str(out), "--eval_results", str(tmp_path / "results.json"), "--keep_projector"]) == 0
    assert module_types(out) == ["Transformer", "Pooling", "Dense"]
    card = (out / "README.md").read_text()
    assert "| Training sentences | 321 |" in card and "| `learning_rate` | 7e-06 |" in card and "76.85" in card
    # non-empty output without --overwrite: exit code 1 and a one-line message (checked before loading anything)
    assert main([str(ckpt), str(out)]) == 1
    assert re.search(r"hf-cse-export: error: .*not empty.*--overwrite", capsys.readouterr().err)


@pytest.mark.slow
def test_python_dash_m_runs_the_export_command(tmp_path):
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-m", "hf_cse.export", str(tmp_path / "nope"), str(tmp_path / "st")],
                         capture_output=True, text=True)
    assert run.returncode == 1 and run.stderr.startswith("hf-cse-export: error: CHECKPOINT")
    assert "Traceback" not in run.stderr and not (tmp_path / "st").exists()


def test_cli_rejects_a_folder_that_is_not_an_hf_cse_checkpoint(tiny_bert_dir, tmp_path, capsys):
    from hf_cse.cli.export import main

    assert main([str(tiny_bert_dir), str(tmp_path / "st")]) == 1
    assert "not an hf_cse checkpoint" in capsys.readouterr().err


# --------------------------------------------------------------------------------------------- run_unsup.py
def _run_unsup_args(folder, tmp_path, *extra):
    from helpers import random_sentences

    train = tmp_path / "train.txt"
    train.write_text("\n".join(random_sentences(24)) + "\n")
    return ["--model_name_or_path", str(folder), "--train_file", str(train), "--max_steps", "2",
            "--per_device_train_batch_size", "8", "--output_dir", str(tmp_path / "out"), "--use_cpu",
            "--disable_tqdm", "true", *extra]


@pytest.mark.slow
def test_run_unsup_exports_and_pushes_the_sentence_transformers_model(tiny_bert_dir, tmp_path, fake_hub, monkeypatch,
                                                                       sentences):
    import huggingface_hub
    from huggingface_hub import HfApi, constants

    from hf_cse.cli import train as train_cli

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: "hf_fake")
    monkeypatch.setattr(HfApi, "create_commit", lambda *a, **k: pytest.fail("the raw checkpoint was pushed"))
    train_cli.train_from_args(_run_unsup_args(tiny_bert_dir, tmp_path, "--push_to_hub", "--hub_model_id",
                               "someone/run"))

    st_dir = tmp_path / "out" / "sentence-transformers"
    card = (st_dir / "README.md").read_text()
    assert_no_placeholders(card)
    assert "train.txt" in card and "| `max_steps` | 2 |" in card
    # 2 steps of 8 of its 24 sentences: the card says the share the run saw
    assert "| Training sentences | 24 (the run trained 0.667 of an epoch: about 16 of them) |" in card
    assert (tmp_path / "out" / "training_info.json").is_file()
    [(repo, folder, _)] = fake_hub["upload_folder"]
    assert repo == "someone/run" and (folder / "modules.json").is_file()  # the export, not the checkpoint
    model = SimCSEModel.from_pretrained(tmp_path / "out")
    tok = AutoTokenizer.from_pretrained(tmp_path / "out")
    assert_same_vectors(encode_export(folder, sentences), reference(model, tok, sentences))


@pytest.mark.slow
def test_a_python_trainer_with_push_to_hub_pushes_the_export_not_the_run_folder(tiny_bert_dir, tmp_path, fake_hub,
                                                                               monkeypatch, sentences):
    """ContrastiveTrainer(args=...push_to_hub=True) left the Trainer's own pushing on: the raw run folder (its
    checkpoints, the unexported SimCSEModel, transformers' card) was uploaded at each save, and no export."""
    import huggingface_hub
    from helpers import tiny_args, tiny_train_dataset
    from huggingface_hub import HfApi, constants

    from hf_cse.trainer import ContrastiveTrainer

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: "hf_fake")
    monkeypatch.setattr(HfApi, "create_commit", lambda *a, **k: pytest.fail("the raw run folder was pushed"))
    ds, tok = tiny_train_dataset(tiny_bert_dir, sentences, tmp_path)
    args = tiny_args(tmp_path / "out", push_to_hub=True, hub_model_id="someone/run", save_strategy="steps",
                     save_steps=2, hub_revision="v1")
    trainer = ContrastiveTrainer(model=SimCSEModel.from_encoder(str(tiny_bert_dir)), args=args, train_dataset=ds,
                                 processing_class=tok)
    trainer.train()
    assert fake_hub["upload_folder"] == []  # checkpoints stay local
    trainer.save_run()
    [(repo, folder, kwargs)] = fake_hub["upload_folder"]
    assert repo == "someone/run" and module_types(folder) == ["Transformer", "Pooling"]
    assert kwargs["revision"] == "v1"  # the branch hub_revision names
    assert not (tmp_path / "out" / "README.md").exists()  # no card of transformers' beside the run



@pytest.mark.slow
def test_trainer_push_to_hub_pushes_the_runs_export_once_saved(tiny_bert_dir, tmp_path, fake_hub, monkeypatch,
                                                                sentences):
    """trainer.push_to_hub() was transformers' own: it would upload the whole output folder (the two-view training
    model, the Trainer's state, transformers' generic card), and offline it failed 12 frames deep in huggingface_hub."""
    import huggingface_hub
    from helpers import tiny_args, tiny_train_dataset
    from huggingface_hub import HfApi, constants

    from hf_cse.trainer import ContrastiveTrainer

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: "hf_fake")
    monkeypatch.setattr(HfApi, "create_commit", lambda *a, **k: pytest.fail("the raw run folder was pushed"))
    ds, tok = tiny_train_dataset(tiny_bert_dir, sentences, tmp_path)
    trainer = ContrastiveTrainer(model=SimCSEModel.from_encoder(str(tiny_bert_dir)), processing_class=tok,
                                 args=tiny_args(tmp_path / "out", hub_model_id="someone/run"), train_dataset=ds)
    trainer.train()
    with pytest.raises(HubPushError, match=r"^push_to_hub pushes the run's sentence-transformers export with its "
                                           r"model card, which save_run\(\) writes: call trainer.save_run\(\) first"):
        trainer.push_to_hub()
    trainer.save_run()
    with pytest.raises(HubPushError, match=r"^push_to_hub takes commit_message, token, revision and private; not "
                                           r"dataset_tags"):
        trainer.push_to_hub(dataset_tags="wiki")
    assert trainer.push_to_hub(revision="v2", private=True) == "https://huggingface.co/someone/run/tree/v2"
    [(repo, folder, kwargs)] = fake_hub["upload_folder"]
    assert repo == "someone/run" and module_types(folder) == ["Transformer", "Pooling"] and kwargs["revision"] == "v2"
    assert fake_hub["create_repo"][0][1]["private"] is True
    assert not (tmp_path / "out" / "README.md").exists()  # no card of transformers' beside the run
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(HubPushError, match=r"^cannot push to someone/run: the Hub is offline .*: unset it and retry"):
        trainer.push_to_hub()

def test_a_python_trainer_with_push_to_hub_offline_is_refused_when_built(tiny_bert_dir, tmp_path, monkeypatch,
                                                                         sentences):
    from helpers import tiny_args, tiny_train_dataset
    from huggingface_hub import constants

    from hf_cse.trainer import ContrastiveTrainer

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    ds, tok = tiny_train_dataset(tiny_bert_dir, sentences, tmp_path)
    with pytest.raises(HubPushError, match=r"^push_to_hub someone/run: the Hub is offline"):
        ContrastiveTrainer(model=SimCSEModel.from_encoder(str(tiny_bert_dir)), train_dataset=ds, processing_class=tok,
                           args=tiny_args(tmp_path / "out", push_to_hub=True, hub_model_id="someone/run"))
    assert not (tmp_path / "out").exists()


def test_run_unsup_push_offline_fails_before_training(tiny_bert_dir, tmp_path, monkeypatch):
    from huggingface_hub import constants

    from hf_cse.cli import train as train_cli

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(HubPushError, match="offline"):
        train_cli.train_from_args(_run_unsup_args(tiny_bert_dir, tmp_path, "--push_to_hub"))
    assert not (tmp_path / "out" / "config.json").exists()


def test_run_unsup_push_with_the_hub_unreachable_fails_before_training(tiny_bert_dir, tmp_path, monkeypatch):
    """A machine without network cannot push: said before the training, naming the network."""
    import socket

    from huggingface_hub import constants

    from hf_cse import hub_reach
    from hf_cse.cli import train as train_cli

    with socket.socket() as sock:  # a port nothing listens on once closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.setattr(hub_reach, "_SWITCHED_OFF", [])
    for name in hub_reach.PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(HubPushError, match=r"push_to_hub .*: the Hub cannot be reached \(127\.0\.0\.1: .*\): check "
                                           "the network, or drop push_to_hub"):
        train_cli.train_from_args(_run_unsup_args(tiny_bert_dir, tmp_path, "--push_to_hub"))
    assert not (tmp_path / "out" / "config.json").exists()


@pytest.mark.parametrize("offline, said", [
    (True, "hf-cse-export: error: --push_to_hub someone/x: the Hub is offline (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE): "
           "unset it, or drop --push_to_hub and push the export later"),
    (False, "hf-cse-export: error: --push_to_hub someone/x: not logged in to the Hugging Face Hub; log in with "
            "`huggingface-cli login` (or `hf auth login`), set HF_TOKEN, or pass --token."),
])
def test_the_export_command_refuses_a_push_it_cannot_make_before_the_model_loads(offline, said, tmp_path,
                                                                                 monkeypatch, capsys):
    """The whole export ran (minutes for a real model), then the push found the Hub offline or no login."""
    import huggingface_hub
    from huggingface_hub import constants

    from hf_cse import hub_reach
    from hf_cse.cli import export as export_cli

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", offline)
    monkeypatch.setattr(hub_reach, "hub_unreachable", lambda: None)
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: None)
    monkeypatch.setattr(export_cli, "source_config", lambda *a: pytest.fail("the checkpoint was read"))
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.json").write_text('{"model_type": "hf_cse_simcse"}')
    assert export_cli.main([str(tmp_path / "run"), str(tmp_path / "out"), "--push_to_hub", "someone/x"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(said), err
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_the_run_folder_loads_as_its_export_in_sentence_transformers_without_hf_cse(tiny_bert_dir, tok, tmp_path,
                                                                                     sentences):
    """SentenceTransformer(<run folder>) read the method model's config.json, a model type transformers does not
    know ("hf_cse_simcse"); the run folder now names its export's modules, so it loads the export, hf_cse unimported."""
    import subprocess
    import sys

    from hf_cse.export import export_after_training

    model = SimCSEModel.from_encoder(str(tiny_bert_dir), loss="gs_infonce")
    export_after_training(model, tok, TrainingArguments(str(tmp_path), use_cpu=True, report_to="none"))
    script = ("import json, sys\nfrom sentence_transformers import SentenceTransformer\n"
              "vectors = SentenceTransformer(sys.argv[1]).encode(json.loads(sys.argv[2]))\n"
              "assert not [name for name in sys.modules if name.startswith('hf_cse')]\n"
              "print(json.dumps(vectors.tolist()))\n")
    run = subprocess.run([sys.executable, "-c", script, str(tmp_path), json.dumps(sentences[:4])],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    want = SentenceTransformer(str(tmp_path / "sentence-transformers")).encode(sentences[:4], convert_to_tensor=True)
    assert torch.allclose(torch.tensor(json.loads(run.stdout)), want, atol=1e-6)


def test_an_export_to_a_relative_folder_loads_in_its_card_from_anywhere(tiny_bert_dir, tmp_path, monkeypatch):
    """hf-cse-export run1 ex/e1 wrote SentenceTransformer("ex/e1") into the card: a path that loads only from the
    folder the export ran in (the export after training wrote the absolute one; a review found it)."""
    monkeypatch.chdir(tmp_path)
    out = to_sentence_transformer(SimCSEModel.from_encoder(str(tiny_bert_dir)), "ex/e1", tokenizer=str(tiny_bert_dir))
    card = (out / "README.md").read_text()
    assert f'SentenceTransformer("{tmp_path / "ex" / "e1"}")' in card and 'SentenceTransformer("ex/e1")' not in card
