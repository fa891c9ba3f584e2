"""A few steps of ``SentenceTransformerTrainer`` with hf_cse's ``CSELoss`` and then ``CachedCSELoss``, dumped for
comparing them under two processes.

Launched by ``tests/export/test_st_integration.py`` as ``torchrun --nproc_per_node 2 tests/st_ddp_worker.py ENCODER
OUT`` (two CPU processes, gloo): each loss trains a model built alike (seed 0, dropout 0, so that the gradient cache's
replay and the plain forward see the same embeddings) on the same data, with the same seed and sampler, so every
process gets the same rows at every step for both; it saves the logged losses, the per-step loss each process
computed, and the trained parameters to ``OUT/rank{R}_{plain,cached}.pt``.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from sentence_transformers import (  # noqa: E402
    SentenceTransformer,
    SentenceTransformerTrainer,
    SentenceTransformerTrainingArguments,
)
from sentence_transformers.sentence_transformer.modules import Pooling, Transformer  # noqa: E402
from tiny_models import SENTENCES  # noqa: E402

from hf_cse.integrations.sentence_transformers import CachedCSELoss, CSELoss  # noqa: E402

PER_DEVICE, STEPS = 4, 3


def model_without_dropout(encoder: str) -> SentenceTransformer:
    torch.manual_seed(0)
    transformer = Transformer(encoder, max_seq_length=16,
                              config_kwargs={"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0})
    return SentenceTransformer(modules=[transformer, Pooling(transformer.get_embedding_dimension(), "mean")],
                               device="cpu")


def train(encoder: str, cached: bool, out: Path, rank: int) -> None:
    model = model_without_dropout(encoder)
    loss = CachedCSELoss(model, "infonce", mini_batch_size=3) if cached else CSELoss(model, "infonce")
    seen: list[float] = []
    compute = loss.compute_loss_from_embeddings

    def recorded(*args, **kwargs):  # the loss this process computes on the gathered batch, step by step
        value = compute(*args, **kwargs)
        seen.append(float(value.detach()))
        return value

    loss.compute_loss_from_embeddings = recorded
    texts = (SENTENCES * 4)[: 2 * PER_DEVICE * STEPS]
    with tempfile.TemporaryDirectory() as tmp:
        args = SentenceTransformerTrainingArguments(tmp, per_device_train_batch_size=PER_DEVICE, max_steps=STEPS,
                                                    use_cpu=True, report_to="none", save_strategy="no",
                                                    disable_tqdm=True, logging_steps=1, optim="sgd",
                                                    learning_rate=0.1, seed=0, dataloader_drop_last=True)
        trainer = SentenceTransformerTrainer(model=model, args=args, loss=loss,
                                             train_dataset=Dataset.from_dict({"a": texts, "b": texts}))
        trainer.train()
    logged = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    params = torch.cat([p.detach().flatten() for p in model.parameters()])
    torch.save({"logged": logged, "computed": seen, "params": params, "world_size": trainer.args.world_size},
               out / f"rank{rank}_{'cached' if cached else 'plain'}.pt")


def main() -> None:
    encoder, out = sys.argv[1], Path(sys.argv[2])
    torch.set_num_threads(1)
    rank = int(os.environ.get("RANK", "0"))
    for cached in (False, True):
        train(encoder, cached, out, rank)


if __name__ == "__main__":
    main()
