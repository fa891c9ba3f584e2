"""Fast CPU dropout: the same distribution as torch's, the same gradients, and invisible outside training."""

import json

import pytest
import torch
from torch import nn
from transformers import AutoModel, AutoTokenizer

from hf_cse.models import SimCSEModel
from hf_cse.models.fast_dropout import ATTENTION_NAME, FastDropout, fast_dropout, install_fast_dropout, keep_mask
from hf_cse.models.fast_dropout import _matmul_attention as _MATMUL  # the original, for the spies below


@pytest.mark.parametrize("p", [0.1, 0.25, 0.5, 0.9])
def test_keep_rate_and_every_lane_match_p(p):
    torch.manual_seed(0)
    keep, keep_prob = keep_mask(torch.Size([1 << 22]), p)
    assert abs(keep_prob - (1 - p)) <= 1 / 65536
    sd = (keep_prob * (1 - keep_prob) / keep.numel()) ** 0.5
    assert abs(keep.float().mean().item() - keep_prob) < 5 * sd
    # each of the four 16-bit lanes of a 64-bit word is uniform (the top one too: full 64-bit draws)
    lanes = keep.view(-1, 4).float().mean(0)
    assert (lanes - keep_prob).abs().max().item() < 5 * sd * 2


def test_neighbouring_mask_elements_are_uncorrelated():
    torch.manual_seed(0)
    keep, _ = keep_mask(torch.Size([1 << 22]), 0.1)
    f = keep.float() - keep.float().mean()
    for lag in (1, 2, 3, 4, 8):
        corr = (f[:-lag] * f[lag:]).mean() / f.var()
        assert abs(corr.item()) < 5 / keep.numel() ** 0.5, lag


def test_expectation_scale_and_zeros():
    torch.manual_seed(0)
    x = torch.full((1 << 20,), 2.0)
    out = fast_dropout(x, 0.1)
    kept = out != 0
    _, keep_prob = keep_mask(torch.Size([1]), 0.1)
    assert torch.allclose(out[kept], torch.tensor(2.0 / keep_prob))
    assert abs(out.mean().item() - 2.0) < 0.01


def test_gradient_is_mask_times_scale():
    torch.manual_seed(1)
    x = torch.randn(64, 32, requires_grad=True)
    out = fast_dropout(x, 0.3)
    upstream = torch.randn_like(out)
    out.backward(upstream)
    _, keep_prob = keep_mask(torch.Size([1]), 0.3)
    kept = out.detach() != 0
    assert torch.allclose(x.grad, upstream * kept / keep_prob)
    assert 0.6 < kept.float().mean() < 0.8


def test_identity_when_off_and_reproducible_under_seed():
    x = torch.randn(8, 8)
    assert fast_dropout(x, 0.1, training=False) is x
    assert fast_dropout(x, 0.0) is x
    torch.manual_seed(3)
    a = fast_dropout(x, 0.1)
    torch.manual_seed(3)
    b = fast_dropout(x, 0.1)
    assert torch.equal(a, b)
    module = FastDropout(0.5).eval()
    assert module(x) is x
    assert torch.equal(fast_dropout(x, 1.0), torch.zeros_like(x))


@pytest.mark.parametrize("arch", ["tiny_bert_dir", "tiny_roberta_dir", "tiny_distilbert_dir"])
def test_model_swaps_every_dropout_and_is_exact_in_eval(arch, request, sentences):
    folder = request.getfixturevalue(arch)
    tok = AutoTokenizer.from_pretrained(folder)
    batch = tok(sentences[:6], padding=True, return_tensors="pt")
    torch.manual_seed(0)
    fast = SimCSEModel.from_encoder(str(folder))
    torch.manual_seed(0)
    plain = SimCSEModel.from_encoder(str(folder), fast_dropout=False)
    assert not any(type(m) is nn.Dropout for m in fast.encoder.modules())
    assert any(isinstance(m, FastDropout) for m in fast.encoder.modules())
    assert not any(isinstance(m, FastDropout) for m in plain.encoder.modules())
    assert fast.encoder.config._attn_implementation == ATTENTION_NAME
    with torch.no_grad():
        a = fast.eval().sentence_embedding(**batch)
        b = plain.eval().sentence_embedding(**batch)
    assert torch.equal(a, b)  # eval = transformers' SDPA path, bit for bit


@pytest.mark.parametrize("arch", ["tiny_bert_dir", "tiny_distilbert_dir"])
def test_training_attention_path_matches_sdpa_with_padding(arch, request, sentences):
    # p tiny but nonzero: the CPU training path (eager softmax + fast dropout) runs and keeps every element,
    # so it must equal SDPA with the same padding mask
    folder = request.getfixturevalue(arch)
    tok = AutoTokenizer.from_pretrained(folder)
    batch = tok(sentences[:6], padding=True, return_tensors="pt")
    assert (batch["attention_mask"] == 0).any()
    model = SimCSEModel.from_encoder(str(folder), dropout=1e-9)
    with torch.no_grad():
        train = model.train().encoder(**batch).last_hidden_state
        test = model.eval().encoder(**batch).last_hidden_state
    real = batch["attention_mask"].bool()
    assert (train - test)[real].abs().max() < 1e-5


def test_attention_dropout_alone_changes_training_outputs(tiny_bert_dir, sentences):
    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    batch = tok(sentences[:4], padding=True, return_tensors="pt")
    model = SimCSEModel.from_encoder(str(tiny_bert_dir))
    for module in model.encoder.modules():  # hidden dropout off, attention dropout 0.5
        if isinstance(module, FastDropout):
            module.p = 0.0
    for layer in model.encoder.encoder.layer:
        layer.attention.self.dropout.p = 0.5
    with torch.no_grad():
        a = model.train().encoder(**batch).last_hidden_state
        b = model.encoder(**batch).last_hidden_state
    assert not torch.allclose(a, b)


def test_saved_encoder_is_plain(tiny_bert_dir, tmp_path):
    model = SimCSEModel.from_encoder(str(tiny_bert_dir))
    model.save_pretrained(tmp_path / "m")
    model.encoder.save_pretrained(tmp_path / "enc")
    for path in (tmp_path / "m" / "config.json", tmp_path / "enc" / "config.json"):
        assert ATTENTION_NAME not in path.read_text()
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    assert config["fast_dropout"] is True
    plain = AutoModel.from_pretrained(tmp_path / "enc")
    assert plain.config._attn_implementation != ATTENTION_NAME
    reloaded = SimCSEModel.from_pretrained(tmp_path / "m")
    assert any(isinstance(m, FastDropout) for m in reloaded.encoder.modules())


def test_install_is_idempotent(tiny_bert_dir):
    model = SimCSEModel.from_encoder(str(tiny_bert_dir), fast_dropout=False)
    assert install_fast_dropout(model.encoder) > 0
    assert install_fast_dropout(model.encoder) == 0


def test_causal_attention_is_left_to_sdpa():
    # a decoder's causal mask can be None with SDPA's is_causal flag; the eager path must not drop it
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from hf_cse.models.fast_dropout import fast_dropout_attention

    module = nn.Module()
    module.is_causal, module.training = True, True
    q, k, v = (torch.randn(2, 3, 5, 4) for _ in range(3))
    torch.manual_seed(0)
    ours, _ = fast_dropout_attention(module, q, k, v, None, dropout=0.2)
    torch.manual_seed(0)
    reference, _ = sdpa_attention_forward(module, q, k, v, None, dropout=0.2)
    assert torch.equal(ours, reference)


# ------------------------------------------------------------------ the compiled CUDA step's matmul attention

def _attention_inputs(keys: int, mask: str | None):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, keys, 4) for _ in range(3))
    if mask is None:
        return q, k, v, None
    keep = torch.ones(2, 1, keys, keys, dtype=torch.bool)
    keep[1, ..., keys - 2:] = False  # the second row's last two tokens are padding
    return q, k, v, keep if mask == "bool" else torch.zeros(keep.shape).masked_fill(~keep, -1e9)


@pytest.mark.parametrize("mask", [None, "bool", "additive"])
def test_compiled_short_attention_takes_matmul_softmax_equal_to_sdpa(monkeypatch, mask):
    # as torch.compile traces it on a GPU (the device rule widened to the CPU here): the matmul path, equal to SDPA
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from hf_cse.models import fast_dropout as fd

    module = nn.Module()
    module.is_causal, module.training = False, True
    q, k, v, m = _attention_inputs(fd.COMPILED_MATMUL_ATTENTION_MAX_KEYS, mask)
    reference, _ = sdpa_attention_forward(module, q, k, v, m, dropout=0.0)
    taken = []
    monkeypatch.setattr(fd, "COMPILED_MATMUL_ATTENTION_DEVICES", ("cpu",))
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    monkeypatch.setattr(fd, "_matmul_attention", lambda *a: taken.append(1) or _MATMUL(*a))
    ours, _ = fd.fast_dropout_attention(module, q, k, v, m, dropout=0.0)
    assert taken and torch.allclose(ours, reference, atol=1e-6)
    # attention dropout is torch's there (inductor compiles its RNG): the same draws as F.dropout's
    torch.manual_seed(1)
    dropped, _ = fd.fast_dropout_attention(module, q, k, v, m, dropout=0.3)
    torch.manual_seed(1)
    scores = torch.matmul(q, k.transpose(2, 3)) * 0.5
    if m is not None:
        scores = scores.masked_fill(~m, torch.finfo(scores.dtype).min) if m.dtype == torch.bool else scores + m
    expected = torch.matmul(nn.functional.dropout(scores.softmax(-1), 0.3), v).transpose(1, 2)
    assert torch.allclose(dropped, expected, atol=1e-6)


def test_longer_sentences_and_the_cpu_keep_sdpa_when_compiled(monkeypatch):
    from hf_cse.models import fast_dropout as fd

    module = nn.Module()
    module.is_causal, module.training = False, True
    taken = []
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    monkeypatch.setattr(fd, "_matmul_attention", lambda *a: taken.append(1) or _MATMUL(*a))
    q, k, v, _ = _attention_inputs(fd.COMPILED_MATMUL_ATTENTION_MAX_KEYS, None)
    fd.fast_dropout_attention(module, q, k, v, None, dropout=0.1)  # a CPU tensor: not the GPU's rule
    monkeypatch.setattr(fd, "COMPILED_MATMUL_ATTENTION_DEVICES", ("cpu",))
    q, k, v, _ = _attention_inputs(fd.COMPILED_MATMUL_ATTENTION_MAX_KEYS + 1, None)
    fd.fast_dropout_attention(module, q, k, v, None, dropout=0.1)  # longer than the measured length
    assert taken == []


def test_compiled_attention_is_logged_for_a_compiled_gpu_run_only(tiny_bert_dir, monkeypatch):
    from hf_cse.models import fast_dropout as fd
    from hf_cse.models.fast_dropout import compiled_attention_note

    encoder = SimCSEModel.from_encoder(str(tiny_bert_dir)).encoder
    note = compiled_attention_note(encoder, torch.device("cuda"), compiled=True)
    assert note and "matmul + softmax" in note and "at most 32 tokens" in note
    assert compiled_attention_note(encoder, torch.device("cuda"), compiled=False) is None
    assert compiled_attention_note(encoder, torch.device("cpu"), compiled=True) is None
    plain = SimCSEModel.from_encoder(str(tiny_bert_dir), fast_dropout=False).encoder  # transformers' own SDPA
    assert compiled_attention_note(plain, torch.device("cuda"), compiled=True) is None
    monkeypatch.setattr(fd, "COMPILED_MATMUL_ATTENTION_MAX_KEYS", 0)  # the rule off: no length takes it
    assert compiled_attention_note(encoder, torch.device("cuda"), compiled=True) is None


@pytest.mark.slow
def test_torch_compile_of_the_encoder_traces_the_matmul_attention(tiny_bert_dir, sentences, monkeypatch):
    # a real torch.compile (on the CPU, the device rule widened to it): the traced graph takes the matmul path and
    # its outputs equal the uncompiled encoder's (dropout off: the arithmetic alone)
    from hf_cse.models import fast_dropout as fd

    monkeypatch.setattr(fd, "COMPILED_MATMUL_ATTENTION_DEVICES", ("cpu",))
    taken = []
    monkeypatch.setattr(fd, "_matmul_attention", lambda *a: taken.append(1) or _MATMUL(*a))
    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    batch = tok(sentences[:4], padding="max_length", max_length=16, truncation=True, return_tensors="pt")
    model = SimCSEModel.from_encoder(str(tiny_bert_dir), dropout=0.0).train()
    with torch.no_grad():
        eager = model.encoder(**batch).last_hidden_state
        assert taken == []  # eager mode on the CPU: SDPA (dropout off)
        torch._dynamo.reset()
        compiled = torch.compile(model.encoder)(**batch).last_hidden_state
    torch._dynamo.reset()
    assert taken, "the compiled graph did not take the matmul attention"
    assert torch.allclose(compiled, eager, atol=1e-5)
