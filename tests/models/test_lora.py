"""LoRA adapters through peft (hf_cse.models.lora): frozen encoder, every method, the cached mode, checkpoints with
the adapter, resume, a merged export that loads without peft, evaluation of an adapter checkpoint, bad input."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest
import torch
from cached_helpers import _assert_same_grads, _batch, _cached, _plain_step
from helpers import hang_timeout, random_sentences, tiny_args, tiny_train_dataset

from hf_cse.cli import train as train_cli
from hf_cse.errors import CSEError
from hf_cse.evaluation.encoder import SentenceEncoder
from hf_cse.models import DiffCSEModel, ImSimCSEModel, SimCSEModel
from hf_cse.models.lora import DEFAULT_TARGETS
from hf_cse.run_files import ADAPTER_FOLDER
from hf_cse.trainer import ContrastiveTrainer

pytestmark = pytest.mark.skipif(importlib.util.find_spec("peft") is None, reason="peft is not installed")


def _trainable(model) -> set[str]:
    return {n for n, p in model.named_parameters() if p.requires_grad}


def test_lora_freezes_the_encoder_and_starts_at_the_pretrained_function(tiny_bert_dir):
    torch.manual_seed(0)
    plain = SimCSEModel.from_encoder(str(tiny_bert_dir)).eval()
    torch.manual_seed(0)
    lora = SimCSEModel.from_encoder(str(tiny_bert_dir), lora_r=4).eval()
    encoder_trainable = {n for n in _trainable(lora) if n.startswith("encoder.")}
    assert encoder_trainable and all(".lora_A." in n or ".lora_B." in n for n in encoder_trainable)
    # the default targets of BERT: every query/key/value/dense layer of both layers
    wrapped = {n.split(".lora_")[0].rsplit(".", 1)[-1] for n in encoder_trainable}
    assert wrapped == set(DEFAULT_TARGETS["bert"])
    assert {n for n in _trainable(lora) if n.startswith("projector.")}  # the head still trains in full
    ids = torch.randint(5, 60, (3, 9))
    mask = torch.ones_like(ids)
    torch.testing.assert_close(lora.sentence_embedding(ids, mask), plain.sentence_embedding(ids, mask))


@pytest.mark.slow
@pytest.mark.parametrize("encoder_dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("model_cls", [SimCSEModel, ImSimCSEModel, DiffCSEModel])
def test_every_method_trains_its_adapters_and_leaves_the_frozen_weights(model_cls, encoder_dtype, tiny_bert_dir,
                                                                         sentences, tmp_path):
    torch.manual_seed(0)
    model = model_cls.from_encoder(str(tiny_bert_dir), lora_r=4, encoder_dtype=encoder_dtype)
    train, tok = tiny_train_dataset(tiny_bert_dir, sentences, tmp_path / "data", repeat=2)
    if model_cls is DiffCSEModel:
        model.attach_generator("unigram", tok, train_token_ids=train["input_ids"])
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer = ContrastiveTrainer(model=model, args=tiny_args(tmp_path / "out", max_steps=2), train_dataset=train,
                                 data_collator=model_cls.collator(tok, model.config), processing_class=tok)
    trainer.train()
    after = dict(model.named_parameters())
    changed = {n for n in before if not torch.equal(before[n], after[n].detach())}
    assert any(".lora_B." in n for n in changed)  # B starts at 0: it moved
    frozen = {n for n in before if n.startswith("encoder.") and ".lora_" not in n}
    assert frozen and not frozen & changed
    if model_cls is DiffCSEModel:  # the training-only discriminator trains in full
        assert any(n.startswith("discriminator.") for n in changed)
    # adapters and head in fp32 whatever the weights' dtype (so are their AdamW states)
    assert {p.dtype for n, p in model.named_parameters() if ".lora_" in n or n.startswith("projector.")} == \
        {torch.float32}
    adapter = next(p for n, p in model.named_parameters() if ".lora_B." in n)
    assert trainer.optimizer.state[adapter]["exp_avg"].dtype == torch.float32


def test_cached_mode_with_lora_equals_the_plain_step(tiny_bert_dir, sentences):
    torch.manual_seed(0)
    model = SimCSEModel.from_encoder(str(tiny_bert_dir), dropout=0.0, lora_r=4, lora_dropout=0.0).train()
    with torch.no_grad():  # non-zero B, so that the adapters' A gets a gradient too
        for name, param in model.named_parameters():
            if ".lora_B." in name:
                param.normal_(std=0.1)
    batch = _batch(tiny_bert_dir, sentences)
    plain_loss, plain = _plain_step(model, [batch])
    loss, cached, _ = _cached(model, batch)
    assert torch.allclose(loss, plain_loss, atol=1e-6)
    assert any(".lora_A." in n for n in plain)
    _assert_same_grads(cached, plain)


def test_checkpoint_holds_the_adapter_and_reloads_exactly(tiny_bert_dir, tmp_path):
    from peft import PeftModel
    from transformers import AutoModel

    torch.manual_seed(0)
    model = SimCSEModel.from_encoder(str(tiny_bert_dir), lora_r=4, lora_alpha=16).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if ".lora_B." in name:
                param.normal_(std=0.1)
    model.save_pretrained(tmp_path / "ckpt")
    assert (tmp_path / "ckpt" / ADAPTER_FOLDER / "adapter_config.json").is_file()
    adapter_config = json.loads((tmp_path / "ckpt" / ADAPTER_FOLDER / "adapter_config.json").read_text())
    assert adapter_config["r"] == 4 and adapter_config["lora_alpha"] == 16
    reloaded = AutoModel.from_pretrained(tmp_path / "ckpt").eval()
    for (name, a), (_, b) in zip(model.state_dict().items(), reloaded.state_dict().items()):
        assert torch.equal(a, b), name
    # the adapter alone, on the plain encoder through peft, gives the same encoder function
    base = AutoModel.from_pretrained(tiny_bert_dir, add_pooling_layer=False)
    peft_encoder = PeftModel.from_pretrained(base, tmp_path / "ckpt" / ADAPTER_FOLDER).eval()
    ids = torch.randint(5, 60, (2, 7))
    with torch.no_grad():
        want = model.encoder(input_ids=ids).last_hidden_state
        torch.testing.assert_close(peft_encoder(input_ids=ids).last_hidden_state, want)


def test_merge_of_bf16_weights_keeps_the_whole_update_in_fp32(tiny_bert_dir):
    """The export's merged weight is base + (alpha / r) * B A to fp32 precision, though the encoder was loaded in
    bf16: merged into bf16 weights, an update small next to the weight was rounded away in part (22 % seen)."""
    from hf_cse.export.modules import describe_adapters
    from hf_cse.models.lora import merged_encoder

    torch.manual_seed(0)
    model = SimCSEModel.from_encoder(str(tiny_bert_dir), lora_r=4, lora_alpha=8, encoder_dtype="bf16")
    layer = model.encoder.base_model.model.encoder.layer[0].attention.self.query
    with torch.no_grad():  # a small known update: 2 * B A with entries about 1e-4, weights about 2e-2
        layer.lora_A["default"].weight.copy_(torch.linspace(-1e-2, 1e-2, layer.lora_A["default"].weight.numel())
                                             .reshape(layer.lora_A["default"].weight.shape))
        layer.lora_B["default"].weight.copy_(torch.linspace(1e-2, -1e-2, layer.lora_B["default"].weight.numel())
                                             .reshape(layer.lora_B["default"].weight.shape))
    base = layer.base_layer.weight.detach().clone()
    assert base.dtype == torch.bfloat16
    want = base.float() + 2.0 * layer.lora_B["default"].weight.detach() @ layer.lora_A["default"].weight.detach()
    merged = merged_encoder(model.encoder)
    got = merged.encoder.layer[0].attention.self.query.weight.detach()
    assert got.dtype == torch.float32 and {p.dtype for p in merged.parameters()} == {torch.float32}
    torch.testing.assert_close(got, want, rtol=0, atol=1e-7)
    assert model.encoder.base_model.model.encoder.layer[0].attention.self.query.base_layer.weight.dtype == \
        torch.bfloat16  # the model itself is left as it was
    assert "saved in fp32" in describe_adapters(model.config)


def test_adapter_folder_holds_the_adapter_when_the_trainer_passes_a_gathered_state_dict(tiny_bert_dir, tmp_path):
    """FSDP and DeepSpeed save through ``save_pretrained(state_dict=...)``, a dict transformers empties while it
    writes the shards: the adapter must still reach ``adapter/`` (not a file of 0 tensors)."""
    from safetensors.torch import load_file

    model = SimCSEModel.from_encoder(str(tiny_bert_dir), lora_r=4)
    model.save_pretrained(tmp_path / "ckpt", state_dict=dict(model.state_dict()))
    adapter = load_file(tmp_path / "ckpt" / ADAPTER_FOLDER / "adapter_model.safetensors")
    assert adapter and all("lora_" in key for key in adapter)
    assert len(adapter) == sum(".lora_" in n for n, _ in model.named_parameters())


def _run_args(folder, tmp_path, *extra):
    train = tmp_path / "train.txt"
    train.write_text("\n".join(random_sentences(40)) + "\n")
    return ["--model_name_or_path", str(folder), "--train_file", str(train), "--max_steps", "3",
            "--per_device_train_batch_size", "8", "--output_dir", str(tmp_path / "out"), "--use_cpu",
            "--disable_tqdm", "true", "--precision", "fp32", "--lora_r", "4", "--save_strategy", "steps",
            "--save_steps", "2", *extra]


@pytest.mark.slow
def test_run_unsup_resumes_and_exports_a_merged_model_that_loads_without_peft(tiny_bert_dir, tmp_path):
    import shutil

    from safetensors.torch import load_file

    args = _run_args(tiny_bert_dir, tmp_path)
    train_cli.train_from_args(args)
    out = tmp_path / "out"
    finished = load_file(out / "model.safetensors")
    assert (out / ADAPTER_FOLDER / "adapter_model.safetensors").is_file()
    assert (out / "checkpoint-2" / ADAPTER_FOLDER / "adapter_model.safetensors").is_file()
    # an interruption after step 2: only the checkpoint (and the run record) is left; the same command resumes
    for path in list(out.iterdir()):
        if path.name not in ("checkpoint-2", "hf_cse_run.json"):
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    train_cli.train_from_args(args)
    resumed = load_file(out / "model.safetensors")
    assert json.loads((out / "trainer_state.json").read_text())["global_step"] == 3
    for name, value in finished.items():
        torch.testing.assert_close(resumed[name], value, msg=lambda m: f"{name}: {m}")

    # the export: a plain encoder (no lora keys), the card records the adapters
    export = out / "sentence-transformers"
    weights = load_file(export / "model.safetensors")
    assert not [k for k in weights if "lora" in k or "base_layer" in k]
    card = (export / "README.md").read_text()
    assert "| Adapters | trained with LoRA (r=4, alpha=8, dropout=0.05" in card

    # hf_cse's evaluation of the adapter checkpoint (run_eval.py's loader), and of the intermediate checkpoint
    sentences = random_sentences(6, seed=3)
    want = SentenceEncoder.from_pretrained(str(out), device="cpu", show_progress_bar=False).encode(sentences)
    ckpt = SentenceEncoder.from_pretrained(str(out / "checkpoint-2"), device="cpu", show_progress_bar=False)
    assert ckpt.encode(sentences).shape == want.shape
    # plain sentence-transformers in a process where peft cannot be imported gives the same vectors
    code = ("import sys, json; sys.modules['peft'] = None\n"
            "from sentence_transformers import SentenceTransformer\n"
            f"m = SentenceTransformer({str(export)!r}, device='cpu')\n"
            f"print(json.dumps(m.encode({sentences!r}).tolist()))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=hang_timeout(300))
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = torch.tensor(json.loads(proc.stdout.strip().splitlines()[-1]))
    cos = torch.nn.functional.cosine_similarity(got, torch.from_numpy(want), dim=-1)
    assert cos.min().item() > 1 - 1e-5


def test_lora_flags_without_peft_fail_before_loading(tiny_bert_dir, tmp_path, monkeypatch):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "peft" else find_spec(name, *a))
    with pytest.raises(ValueError, match=r"needs the peft package: pip install 'hf_cse\[lora\]'"):
        train_cli.train_from_args(_run_args(tiny_bert_dir, tmp_path))
    assert not (tmp_path / "out").exists()  # refused before the output folder was made


def test_target_modules_matching_nothing_name_the_linear_layers(tiny_bert_dir, tmp_path):
    with pytest.raises(ValueError, match=r"match no module of the 'bert' encoder; its linear layers are named "
                                         r"dense, key, query, value"):
        train_cli.train_from_args(_run_args(tiny_bert_dir, tmp_path, "--lora_target_modules", "q_proj", "v_proj"))
    assert not (tmp_path / "out").exists()



@pytest.mark.parametrize("targets, refused", [
    (["query", "valeu"], "lora_target_modules 'valeu' matches no module of the 'bert' encoder (did you mean 'value'?)"),
    (["query", "q_proj"], "lora_target_modules 'q_proj' matches no module of the 'bert' encoder"),
    (["q_proj"], "lora_target_modules ['q_proj'] match no module of the 'bert' encoder"),
])
def test_each_target_module_must_match_and_from_encoder_checks_before_loading(tiny_bert_dir, monkeypatch, targets,
                                                                            refused):
    """A misspelt name beside a valid one was dropped by peft without a word (the log listed it as adapted); from
    Python, a list matching nothing failed inside peft after the weights loaded."""
    from hf_cse.models import base

    monkeypatch.setattr(base, "load_encoder", lambda *a, **k: pytest.fail("the weights were loaded"))
    with pytest.raises(CSEError) as err:
        SimCSEModel.from_encoder(str(tiny_bert_dir), lora_r=2, lora_target_modules=targets)
    assert str(err.value).startswith(refused) and str(err.value).endswith(
        "its linear layers are named dense, key, query, value: pass some of those to lora_target_modules.")



@pytest.mark.parametrize("given, switch", [({"lora_dropout": 0.3}, "lora_r"), ({"mlm_weight": 0.5}, "do_mlm"),
                                           ({"off_dropout_grad": False}, "off_dropout")])
def test_a_setting_whose_switch_is_off_is_refused_by_from_encoder(tiny_mlm_dir, given, switch):
    """from_encoder(lora_dropout=0.3) built a model without LoRA, silently; the command line refused the flag."""
    (name,) = given
    with pytest.raises(CSEError) as err:
        SimCSEModel.from_encoder(str(tiny_mlm_dir), **given)
    needed = {"lora_r": "lora_r > 0", "do_mlm": "do_mlm true", "off_dropout": "off_dropout true"}[switch]
    off = {"lora_r": "0"}.get(switch, "false")
    assert str(err.value) == f"{name} does nothing while {switch} is {off}: it acts only with {needed}. Set that, or " \
                             f"drop {name}."
    turned_on = {"lora_r": {"lora_r": 2}, "do_mlm": {"do_mlm": True}, "off_dropout": {"off_dropout": True,
                                                                                      "loss": "off_dropout_infonce"}}
    SimCSEModel.from_encoder(str(tiny_mlm_dir), **given, **turned_on[switch])
    # the field's default given (the command line passes every field) changes nothing: not refused
    SimCSEModel.from_encoder(str(tiny_mlm_dir), **{name: getattr(SimCSEModel.config_class(), name)})


def test_lora_settings_without_a_rank_are_refused(tiny_bert_dir):
    with pytest.raises(ValueError, match="lora_r is 0"):
        SimCSEModel.config_class(lora_alpha=16)


def test_activation_checkpointing_keeps_the_adapters_gradient(tiny_bert_dir, sentences):
    """The frozen embeddings give the checkpointed layers inputs without requires_grad: the adapters must still get
    their gradient (transformers 5 checkpoints non-reentrantly), equal to the one without checkpointing."""
    torch.manual_seed(0)
    model = SimCSEModel.from_encoder(str(tiny_bert_dir), dropout=0.0, lora_r=4, lora_dropout=0.0).train()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if ".lora_B." in name:
                param.normal_(std=0.1)
    batch = _batch(tiny_bert_dir, sentences)
    _, plain = _plain_step(model, [batch])
    model.enable_activation_checkpointing()
    _, checkpointed = _plain_step(model, [batch])
    assert any(".lora_A." in n for n in checkpointed)
    _assert_same_grads(checkpointed, plain)


@pytest.mark.slow
def test_run_eval_scores_an_adapter_checkpoint(tiny_bert_dir, tmp_path):
    """run_eval.py on an hf_cse checkpoint with LoRA adapters scores the adapted encoder (not the frozen one)."""
    from eval_helpers import REPO, write_toy_senteval

    from hf_cse.evaluation import data as D

    sys.path.insert(0, str(REPO))
    from hf_cse.cli import evaluate as eval_cli

    torch.manual_seed(0)
    model = SimCSEModel.from_encoder(str(tiny_bert_dir), lora_r=4, pooler_type="avg")
    with torch.no_grad():
        for name, param in model.named_parameters():
            if ".lora_B." in name:
                param.normal_(std=0.5)
    model.save_pretrained(tmp_path / "ckpt")
    from transformers import AutoTokenizer

    AutoTokenizer.from_pretrained(tiny_bert_dir).save_pretrained(tmp_path / "ckpt")
    se = write_toy_senteval(tmp_path / "se")
    D.clear_cache()
    scores = {}
    for name in ("ckpt", "base"):
        path = tmp_path / "ckpt" if name == "ckpt" else tiny_bert_dir
        assert eval_cli.main(["--model_name_or_path", str(path), "--senteval_data_dir", str(se), "--tasks",
                              "STS-B", "--pooler", "avg", "--output_dir", str(tmp_path / f"{name}-eval"),
                              "--disable_tqdm"]) == 0
        scores[name] = json.loads((tmp_path / f"{name}-eval" / "results.json").read_text())["STSBenchmark"]
    assert scores["ckpt"] != scores["base"]  # the adapters change what is scored


def test_peft_all_linear_is_accepted_as_a_target(tiny_bert_dir):
    from hf_cse.models.lora import check_targets_match

    model = SimCSEModel.from_encoder(str(tiny_bert_dir), lora_r=4, lora_target_modules=["all-linear"])
    check_targets_match(model.config)
    wrapped = {n.split(".lora_")[0].rsplit(".", 1)[-1] for n in _trainable(model) if n.startswith("encoder.")}
    assert {"query", "key", "value", "dense"} <= wrapped
