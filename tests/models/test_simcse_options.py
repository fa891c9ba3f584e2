"""SimCSE's own options checked against the authors' code (princeton-nlp/SimCSE, ``simcse/models.py`` cl_forward and
``train.py``'s collator) on identical inputs: ``hard_negative_weight`` and the auxiliary MLM objective."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from hf_cse.losses import build_loss, loss_hyperparameters


def authors_hard_negative_loss(z1, z2, z3, temp, z3_weight):
    """cl_forward with num_sent == 3, written as the authors do (float64)."""
    cos = lambda a, b: F.cosine_similarity(a, b, dim=-1) / temp  # noqa: E731  (their Similarity)
    cos_sim = cos(z1.unsqueeze(1), z2.unsqueeze(0))
    z1_z3_cos = cos(z1.unsqueeze(1), z3.unsqueeze(0))
    cos_sim = torch.cat([cos_sim, z1_z3_cos], 1)
    labels = torch.arange(cos_sim.size(0)).long()
    weights = torch.tensor(
        [[0.0] * (cos_sim.size(-1) - z1_z3_cos.size(-1)) + [0.0] * i + [z3_weight]
         + [0.0] * (z1_z3_cos.size(-1) - i - 1) for i in range(z1_z3_cos.size(-1))], dtype=cos_sim.dtype)
    return F.cross_entropy(cos_sim + weights, labels)


@pytest.mark.parametrize("weight", [0.0, 0.7, -2.0])
def test_infonce_hard_negative_weight_equals_the_authors_code(weight):
    g = torch.Generator().manual_seed(0)
    z1, z2, z3 = (torch.randn(6, 5, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(3))
    ours = build_loss("infonce", temperature=0.05, hard_negative_weight=weight)(z1, z2, z_neg=z3).loss
    theirs = authors_hard_negative_loss(z1, z2, z3, 0.05, weight)
    assert ours.item() == pytest.approx(theirs.item(), rel=1e-12)
    g_ours = torch.autograd.grad(ours, (z1, z2, z3))
    g_theirs = torch.autograd.grad(theirs, (z1, z2, z3))
    for a, b in zip(g_ours, g_theirs):
        assert torch.allclose(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize(("loss", "kwargs"), [("focal_infonce", {"m": 0.3}), ("gs_infonce", {"num_noise": 0})])
def test_hard_negative_weight_shifts_only_the_own_hard_negative_logit(loss, kwargs):
    """The other losses taking hard negatives: the weight is the same log-weight on the anchor's own hard negative;
    with 0 nothing changes, and a large weight drives the loss towards log(e^w ...) of that one column."""
    g = torch.Generator().manual_seed(1)
    z1, z2, z3 = (torch.randn(5, 4, generator=g, dtype=torch.float64) for _ in range(3))
    base = build_loss(loss, **kwargs)(z1, z2, z_neg=z3).loss
    assert build_loss(loss, hard_negative_weight=0.0, **kwargs)(z1, z2, z_neg=z3).loss.item() == base.item()
    up = build_loss(loss, hard_negative_weight=1.0, **kwargs)(z1, z2, z_neg=z3).loss
    down = build_loss(loss, hard_negative_weight=-1.0, **kwargs)(z1, z2, z_neg=z3).loss
    assert down < base < up
    if loss == "focal_infonce":
        fn = build_loss(loss, hard_negative_weight=0.5, **kwargs)
        logits = fn.logits(z1, z2, z3)
        plain = build_loss(loss, **kwargs).logits(z1, z2, z3)
        assert torch.allclose(logits - plain, F.pad(0.5 * torch.eye(5, dtype=torch.float64), (5, 0)), atol=1e-12)


def test_hard_negative_weight_is_a_hyperparameter_of_the_losses_taking_hard_negatives_only():
    from hf_cse.losses import available_losses, get_loss_class

    for name in available_losses():
        assert ("hard_negative_weight" in loss_hyperparameters(name)) == get_loss_class(name).takes_hard_negatives
    with pytest.raises(ValueError, match="hard_negative_weight"):
        build_loss("infonce", hard_negative_weight=float("nan"))


@pytest.mark.parametrize(("extra", "message"), [
    (["--hard_negative_weight", "0.5"], r"--hard_negative_weight 0.5 weighs hard negatives, but the data has none"),
    (["--loss", "mpt", "--hard_negative_weight", "0.5"], r"--loss mpt does not take --hard_negative_weight"),
])
def test_hard_negative_weight_without_hard_negatives_is_one_line_before_any_model(tiny_bert_dir, tmp_path,
                                                                                   monkeypatch, extra, message):
    from hf_cse.cli import train as train_cli
    from hf_cse.models import SimCSEModel

    monkeypatch.setattr(SimCSEModel, "from_encoder", classmethod(lambda *a, **k: pytest.fail("model loaded")))
    with pytest.raises(Exception, match=message) as err:
        train_cli.train_from_args(["--model_name_or_path", str(tiny_bert_dir), "--output_dir", str(tmp_path / "out"),
                        "--use_cpu", "--max_steps", "1", *extra])
    assert "\n" not in str(err.value)


# ------------------------------------------------------------------ the auxiliary MLM objective
def authors_mask_tokens(tokenizer, inputs, mlm_probability=0.15):
    """SimCSE's train.py OurDataCollatorWithPadding.mask_tokens, verbatim but for the self."""
    inputs = inputs.clone()
    labels = inputs.clone()
    probability_matrix = torch.full(labels.shape, mlm_probability)
    special_tokens_mask = [tokenizer.get_special_tokens_mask(val, already_has_special_tokens=True)
                           for val in labels.tolist()]
    special_tokens_mask = torch.tensor(special_tokens_mask, dtype=torch.bool)
    probability_matrix.masked_fill_(special_tokens_mask, value=0.0)
    masked_indices = torch.bernoulli(probability_matrix).bool()
    labels[~masked_indices] = -100
    indices_replaced = torch.bernoulli(torch.full(labels.shape, 0.8)).bool() & masked_indices
    inputs[indices_replaced] = tokenizer.convert_tokens_to_ids(tokenizer.mask_token)
    indices_random = torch.bernoulli(torch.full(labels.shape, 0.5)).bool() & masked_indices & ~indices_replaced
    random_words = torch.randint(len(tokenizer), labels.shape, dtype=torch.long)
    inputs[indices_random] = random_words[indices_random]
    return inputs, labels


def _mlm_model_and_batch(model_dir, sentences, **config):
    from transformers import AutoTokenizer

    from hf_cse.models import SimCSEModel

    tok = AutoTokenizer.from_pretrained(model_dir)
    torch.manual_seed(0)
    model = SimCSEModel.from_encoder(str(model_dir), do_mlm=True, dropout=0.0, **config)
    feats = [tok(s, truncation=True, max_length=32) for s in sentences[:6]]
    torch.manual_seed(7)
    return model, tok, feats, type(model).collator(tok, model.config)(feats)


def test_mlm_masking_equals_the_authors_collator(tiny_mlm_dir, sentences):
    from hf_cse.data import TwoViewCollator

    _, tok, feats, batch = _mlm_model_and_batch(tiny_mlm_dir, sentences)
    flat = TwoViewCollator(tok)(feats)["input_ids"].view(12, -1)  # the authors' flattened bs * num_sent rows
    torch.manual_seed(7)
    ids, labels = authors_mask_tokens(tok, flat)
    assert torch.equal(batch["mlm_input_ids"].view(12, -1), ids)
    assert torch.equal(batch["mlm_labels"].view(12, -1), labels)
    assert (labels != -100).any() and (ids == tok.mask_token_id).any()


def test_mlm_term_equals_the_authors_cl_forward(tiny_mlm_dir, sentences):
    """mlm_weight x CE(lm_head(encoder(mlm_input_ids).last_hidden_state), mlm_labels), the authors' formula, on the
    checkpoint's own BertForMaskedLM (float64); the head starts as the checkpoint's cls.predictions."""
    from transformers import BertForMaskedLM

    model, tok, _, batch = _mlm_model_and_batch(tiny_mlm_dir, sentences, mlm_weight=0.3)
    reference = BertForMaskedLM.from_pretrained(tiny_mlm_dir).double().eval()
    theirs = reference.cls.state_dict()
    for name, ours in model.lm_head.state_dict().items():  # (their predictions.bias is their decoder.bias)
        assert torch.equal(ours.double(), theirs[name]), name
    model.double().train()
    out = model(**batch)
    length = batch["input_ids"].shape[-1]
    hidden = reference.bert(batch["mlm_input_ids"].view(-1, length), attention_mask=batch["attention_mask"].view(
        -1, length), token_type_ids=batch["token_type_ids"].view(-1, length)).last_hidden_state
    prediction_scores = reference.cls(hidden)
    expected = 0.3 * F.cross_entropy(prediction_scores.view(-1, reference.config.vocab_size),
                                     batch["mlm_labels"].view(-1))
    assert out.aux_losses["mlm_loss"].item() == pytest.approx(expected.item(), rel=1e-10)
    out.aux_losses["mlm_loss"].backward()
    assert model.lm_head.predictions.decoder.weight.grad.abs().sum() > 0


def test_mlm_refusals_are_one_line(tiny_bert_dir, tiny_mlm_dir):
    from hf_cse.cached import IncompatibleOptionsError, check_cached_compatible
    from hf_cse.models import SimCSEModel, get_method
    from hf_cse.models.mlm import NoMaskedLMHeadError

    with pytest.raises(NoMaskedLMHeadError, match=r"has no pretrained masked-LM head .* drop do_mlm") as err:
        SimCSEModel.from_encoder(str(tiny_bert_dir), do_mlm=True)  # a BertModel checkpoint: no cls.predictions
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="DiffCSE: do_mlm does not apply"):
        get_method("diffcse").config_class(do_mlm=True)
    with pytest.raises(IncompatibleOptionsError, match="incompatible with do_mlm"):
        check_cached_compatible(get_method("simcse").config_class(do_mlm=True), 4)
    with pytest.raises(ValueError, match="mlm_weight must be a finite number > 0"):
        get_method("simcse").config_class(mlm_weight=0.0)


@pytest.mark.slow
def test_run_unsup_do_mlm_logs_the_term_and_the_model_reloads(tiny_mlm_dir, tmp_path):
    from hf_cse.cli import train as train_cli
    from hf_cse.models import SimCSEModel

    out = tmp_path / "out"
    train_cli.train_from_args(["--model_name_or_path", str(tiny_mlm_dir), "--output_dir", str(out), "--use_cpu",
                    "--max_steps", "2", "--per_device_train_batch_size", "8", "--logging_steps", "1",
                    "--do_mlm", "--mlm_weight", "0.1", "--disable_tqdm", "true"])
    import json

    logs = [h for h in json.loads((out / "trainer_state.json").read_text())["log_history"] if "loss" in h]
    assert len(logs) == 2 and all(h["mlm_loss"] > 0 for h in logs)
    reloaded = SimCSEModel.from_pretrained(out)
    assert reloaded.config.do_mlm and reloaded.lm_head is not None
    from safetensors.torch import load_file

    saved = load_file(out / "model.safetensors")
    head = reloaded.lm_head.state_dict()
    assert head and all(torch.equal(value, saved["lm_head." + name]) for name, value in head.items())


def test_do_mlm_on_an_architecture_without_a_masked_lm_is_refused_before_any_model(tmp_path, monkeypatch):
    from tiny_models import tiny_tokenizer
    from transformers import GPT2Config

    from hf_cse.cli import train as train_cli
    from hf_cse.models import SimCSEModel
    from hf_cse.models.mlm import NoMaskedLMHeadError

    GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=100, n_positions=64).save_pretrained(tmp_path / "gpt2")
    tiny_tokenizer(tmp_path / "gpt2").save_pretrained(tmp_path / "gpt2")  # a model folder has its tokenizer
    monkeypatch.setattr(SimCSEModel, "from_encoder", classmethod(lambda *a, **k: pytest.fail("model loaded")))
    with pytest.raises(NoMaskedLMHeadError, match=r"a 'gpt2' encoder has no masked-LM head") as err:
        train_cli.train_from_args(["--model_name_or_path", str(tmp_path / "gpt2"), "--output_dir",
                        str(tmp_path / "out"),
                        "--use_cpu", "--max_steps", "1", "--pooler_type", "avg", "--do_mlm"])
    assert "\n" not in str(err.value)
