"""Fast dropout for CPU training: the same Bernoulli masks, drawn 16 random bits at a time.

Why: on CPU, torch's dropout draws one float per element (``bernoulli_``), ~15 ns each, single-threaded; on
the packaged MiniLM at batch 2x64, length 32 the 19 dropout calls were 16 % of a SimCSE training step
(``torch.profiler``, see ``benchmarks/README.md``). Here the mask comes from 64-bit words of the same
generator (``torch.Generator`` default, so ``torch.manual_seed`` and the cached mode's RNG replay still hold),
split into four 16-bit lanes and compared with a threshold: element kept with probability
``1 - round(p * 65536) / 65536`` (|error| <= 7.7e-6; p = 0.1 -> keep 0.899994), kept values scaled by the exact
inverse keep probability, so ``E[out] = x`` as in ``nn.Dropout``. The mask is stored as ``bool`` for backward
(what torch's dropout saves, so activation memory is unchanged).

It replaces every ``nn.Dropout`` of an encoder (``FastDropout`` is a subclass, flags and ``p`` unchanged) and
the attention-probability dropout, which transformers runs inside SDPA: the encoder's attention is switched to
``hf_cse_sdpa``, which is transformers' SDPA attention whenever dropout is off (eval, or p = 0) or the tensors
are not on CPU (CUDA's fused dropout is already fast), and otherwise the eager softmax attention with this
dropout (grouped-query attention included). An encoder loaded with ``eager`` attention keeps transformers' eager
attention, whose attention-probability dropout stays torch's; ``flash_attention_2`` runs on CUDA only, where this
module never draws masks (``hf_cse.models.loading``; tested in ``tests/models/test_encoder_loading.py``).
Under ``torch.compile`` both fall back to torch's dropout, which inductor compiles with its own RNG
(``random_`` would break the graph at every dropout). ``CSEConfig(fast_dropout=False)`` keeps torch's dropout.
Nothing is saved: checkpoints and exports are plain encoders.

One more choice lives in ``hf_cse_sdpa``, for speed on a GPU: under ``torch.compile`` on CUDA, sentences of at most
:data:`COMPILED_MATMUL_ATTENTION_MAX_KEYS` tokens take the matmul + softmax attention (torch's dropout), which the
compiler fuses, instead of SDPA's fused kernel (cuDNN's on an H100). Measured on an H100 (benchmarks/README.md
section 21; BERT-base, bf16, length 32, the whole compiled training step): x1.045 the step's speed at batch 64, x1.099
at batch 1024. Longer sentences were not measured and keep SDPA. The arithmetic is attention's own, so results agree
within rounding (attention dropout draws other masks, with the same probability).
"""

from __future__ import annotations

import torch
from torch import nn

from ..seams import attention_implementation, set_attention_implementation
from .padding_free import register_sdpa_attention

ATTENTION_NAME = "hf_cse_sdpa"
_LANES = 1 << 16
#: key lengths up to which a compiled CUDA step takes the matmul + softmax attention (see the module docstring)
COMPILED_MATMUL_ATTENTION_MAX_KEYS = 32
COMPILED_MATMUL_ATTENTION_DEVICES = ("cuda",)


def keep_mask(shape: torch.Size, p: float) -> tuple[torch.Tensor, float]:
    """A bool mask of ``shape`` (True = keep) and the exact keep probability it was drawn with."""
    numel = 1
    for size in shape:
        numel *= size
    threshold = round(p * _LANES)
    # full 64-bit range: every 16-bit lane is uniform (the default random_() leaves the top bit 0)
    words = torch.empty((numel + 3) // 4, dtype=torch.int64).random_(-(2**63), None)
    lanes = words.view(torch.int16)[:numel]
    return (lanes >= threshold - _LANES // 2).view(shape), 1.0 - threshold / _LANES


class _MaskedScale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, keep, scale):
        ctx.save_for_backward(keep)
        ctx.scale = scale
        return torch.where(keep, x, 0.0).mul_(scale)

    @staticmethod
    def backward(ctx, grad):
        (keep,) = ctx.saved_tensors
        return torch.where(keep, grad, 0.0).mul_(ctx.scale), None, None


def fast_dropout(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    """``F.dropout(x, p, training)`` with the CPU mask drawn 16 bits per element (see the module docstring)."""
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu" or p >= 1.0 or torch.compiler.is_compiling():  # compiled: inductor's own RNG
        return nn.functional.dropout(x, p, training)
    keep, keep_prob = keep_mask(x.shape, p)
    return _MaskedScale.apply(x, keep, 1.0 / keep_prob)


class FastDropout(nn.Dropout):
    """``nn.Dropout`` drawing its CPU masks with :func:`fast_dropout`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return fast_dropout(x, self.p, self.training)


def compiled_matmul_attention(query: torch.Tensor, key: torch.Tensor) -> bool:
    """Whether this call, traced by ``torch.compile``, takes the matmul + softmax attention for its speed there."""
    return (torch.compiler.is_compiling() and query.device.type in COMPILED_MATMUL_ATTENTION_DEVICES
            and key.shape[-2] <= COMPILED_MATMUL_ATTENTION_MAX_KEYS)


def compiled_attention_note(encoder: nn.Module, device: torch.device, compiled: bool) -> str | None:
    """The log line saying which attention a compiled run's training step takes, or None where the rule is moot."""
    config = getattr(encoder, "config", None)
    if not compiled or device.type not in COMPILED_MATMUL_ATTENTION_DEVICES or COMPILED_MATMUL_ATTENTION_MAX_KEYS < 1 \
            or attention_implementation(config) != ATTENTION_NAME or getattr(config, "is_decoder", False):
        return None
    return (f"attention under torch.compile: matmul + softmax fused by the compiler for sentences of at most "
            f"{COMPILED_MATMUL_ATTENTION_MAX_KEYS} tokens (faster than SDPA's fused kernel there on an H100: x1.05 the "
            "step at batch 64, x1.10 at 1024), SDPA for longer ones")


def fast_dropout_attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None, **kwargs):
    """transformers attention function ``hf_cse_sdpa``: SDPA, except for CPU training with dropout and compiled
    CUDA steps on short sentences (the module docstring says why)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    causal = kwargs.get("is_causal")
    causal = getattr(module, "is_causal", False) if causal is None else causal
    # causal masks are left to SDPA (is_causal flag)
    if not causal and compiled_matmul_attention(query, key):
        return _matmul_attention(module, query, key, value, attention_mask, scaling,
                                 lambda probs: nn.functional.dropout(probs, dropout, dropout > 0.0))
    # a compiled graph otherwise keeps SDPA too (inductor fuses its own dropout)
    if dropout == 0.0 or query.device.type != "cpu" or causal or torch.compiler.is_compiling():
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    return _matmul_attention(module, query, key, value, attention_mask, scaling,
                             lambda probs: fast_dropout(probs, dropout, True))


def _matmul_attention(module, query, key, value, attention_mask, scaling, dropout):
    """softmax(q k^T * scaling + mask) v, with ``dropout`` on the probabilities; heads first in, tokens first out."""
    from transformers.integrations.sdpa_attention import repeat_kv

    if scaling is None:
        scaling = query.size(-1) ** -0.5
    groups = getattr(module, "num_key_value_groups", 1)
    if groups > 1:  # grouped-query attention (Llama, Mistral...): each key/value head serves `groups` query heads
        key, value = repeat_kv(key, groups), repeat_kv(value, groups)
    scores = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        if attention_mask.dtype == torch.bool:  # SDPA-style mask: True = attend
            scores = scores.masked_fill(~attention_mask, torch.finfo(scores.dtype).min)
        else:
            scores = scores + attention_mask
    probs = dropout(torch.softmax(scores, dim=-1))
    return torch.matmul(probs, value).transpose(1, 2).contiguous(), None


def install_fast_dropout(encoder: nn.Module) -> int:
    """Swap every ``nn.Dropout`` of ``encoder`` for :class:`FastDropout` and route SDPA attention through
    ``hf_cse_sdpa``. Returns the number of dropout modules replaced. Idempotent."""
    replaced = 0
    for parent in encoder.modules():
        for name, child in list(parent.named_children()):
            if type(child) is nn.Dropout:
                swapped = FastDropout(child.p, child.inplace)
                swapped.train(child.training)
                setattr(parent, name, swapped)
                replaced += 1
    config = getattr(encoder, "config", None)
    if attention_implementation(config) == "sdpa":
        register_sdpa_attention(ATTENTION_NAME, fast_dropout_attention)
        set_attention_implementation(config, ATTENTION_NAME)
    return replaced
