"""Inputs that used to pass silently or end in a deep traceback now fail early with one clear message."""

import json
import logging

import pytest
import torch
from tiny_models import tiny_tokenizer
from transformers import AutoTokenizer, GPT2Config, GPT2Model

import hf_cse.models.simcse as simcse_module
from hf_cse.data import DataError, load_train_dataset, read_sentences, tokenize_dataset
from hf_cse.losses import available_losses, build_loss, get_loss_class
from hf_cse.models import DiffCSEModel, SimCSEModel
from hf_cse.models.generators import GeneratorError, MaskedLMGenerator, load_generator
from hf_cse.objectives import build_objectives, compute_objectives

# losses that take only (z1, z2); off_dropout_infonce also needs z_nodropout (tested on its own)
PAIR_LOSSES = [name for name in available_losses() if not get_loss_class(name).extra_inputs]


def _views(n=6, dim=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    z1 = torch.randn(n, dim, generator=g)
    return z1, z1 + 0.1 * torch.randn(n, dim, generator=g)


# ------------------------------------------------------------------ loss inputs


def test_mixed_dtype_views_are_one_type_error():
    z1, z2 = _views()
    with pytest.raises(TypeError, match=r"z1 is torch.float32 but z2 is torch.bfloat16"):
        build_loss("infonce")(z1, z2.bfloat16())


def test_mixed_dtype_extra_input_is_refused():
    z1, z2 = _views()
    loss = build_loss("off_dropout_infonce")
    with pytest.raises(TypeError, match=r"z_nodropout is torch.float16"):
        loss(z1, z2, z_nodropout=z1.half())


def test_bf16_views_stay_legal_and_are_upcast():
    z1, z2 = _views()
    out = build_loss("infonce")(z1.bfloat16(), z2.bfloat16())
    assert out.loss.dtype == torch.float32 and torch.isfinite(out.loss)


def test_integer_embeddings_are_refused():
    with pytest.raises(TypeError, match="floating-point"):
        build_loss("infonce")(torch.ones(4, 8, dtype=torch.long), torch.ones(4, 8, dtype=torch.long))


@pytest.mark.parametrize("name", PAIR_LOSSES)
def test_a_zero_row_is_refused_by_every_loss(name):
    z1, z2 = _views()
    z2[3] = 0.0
    with pytest.raises(ValueError, match=r"1 of 6 rows of z2 cannot be normalised \(row 3's norm is 0"):
        build_loss(name)(z1, z2)


@pytest.mark.parametrize("name", ["infonce", "focal_infonce", "barlow_twins"])
def test_all_zero_views_are_refused_instead_of_a_constant_loss(name):
    # before: infonce / focal_infonce returned log 6 and barlow_twins a constant, each with zero gradient
    zeros = torch.zeros(6, 8, requires_grad=True)
    with pytest.raises(ValueError, match="6 of 6 rows of z1 cannot be normalised.*zero gradient"):
        build_loss(name)(zeros, zeros + 0)


def test_a_row_whose_norm_overflows_is_refused():
    z1, z2 = _views()
    z1[0] = 1e20  # finite, but its squared norm overflows float32, so it normalises to zero
    with pytest.raises(ValueError, match="row 0's norm overflows"):
        build_loss("infonce")(z1, z2)


def test_a_zero_extra_input_row_is_refused():
    z1, z2 = _views()
    z_nodropout = z1.clone()
    z_nodropout[1] = 0.0
    with pytest.raises(ValueError, match="rows of z_nodropout cannot be normalised"):
        build_loss("off_dropout_infonce")(z1, z2, z_nodropout=z_nodropout)


def test_small_but_nonzero_rows_still_train():
    z1, z2 = _views()
    z1 = (z1 * 1e-6).requires_grad_()  # norm ~3e-6, well above the 1e-8 floor
    out = build_loss("infonce")(z1, z2)
    out.loss.backward()
    assert z1.grad.abs().sum() > 0
