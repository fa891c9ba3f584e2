"""One training step of ContrastiveTrainer per case, dumped for comparing process counts.

Launched by ``tests/trainer/test_distributed.py`` as ``torchrun --nproc_per_node 2 tests/dist_worker.py ...``
(every process takes its rank's contiguous slice of the global batch, as the distributed sampler's
rank-order gather would) and as a plain ``python tests/dist_worker.py ...`` (one process, the whole
global batch). Each case builds the tiny model deterministically with dropout 0 (so every run sees the
same "masks"), runs ``trainer.training_step`` (compute_loss or the cached step + accelerator.backward
through DDP, or through FSDP2 for the ``fsdp`` cases) and saves the loss, the flattened parameter gradients
and the step's metrics (local, and reduced over processes as a logging step does) to ``OUT/rank{R}.pt``.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from tiny_models import SENTENCES  # noqa: E402
from transformers import AutoTokenizer, TrainingArguments  # noqa: E402

from hf_cse.distributed import world_size  # noqa: E402
from hf_cse.models import get_method  # noqa: E402
from hf_cse.trainer import ContrastiveTrainer  # noqa: E402


def global_batch(model, tokenizer, n: int, triplets: bool = False) -> dict[str, torch.Tensor]:
    """The global batch, collated once (same padding, same DiffCSE edits) so every process count sees
    identical tensors; each process then takes its rows. ``triplets``: (anchor, positive, hard negative) rows
    of three different sentences (hf_cse.data.PairCollator)."""
    texts = (SENTENCES * 4)[: n + 2]
    feats = [tokenizer(s, truncation=True, max_length=32) for s in texts[:n]]
    torch.manual_seed(5)
    if triplets:
        from hf_cse.data import PAIR_VIEWS, PairCollator

        rows = [{p + k: v for p, j in zip(PAIR_VIEWS, (i, i + 1, i + 2))
                 for k, v in tokenizer(texts[j], truncation=True, max_length=32).items()} for i in range(n)]
        return PairCollator(tokenizer)(rows)
    return type(model).collator(tokenizer, model.config)(feats)


def run_case(case: dict, model_dir: str, tokenizer, n_global: int, rank: int, procs: int, tmp: str) -> dict:
    torch.manual_seed(1234)  # identical weights (projector init) and loss RNG in every process and run
    config = {"dropout": 0.0, "loss": case["loss"], "loss_kwargs": case.get("loss_kwargs", {})}
    config.update(case.get("config", {}))
    model = get_method(case.get("method", "simcse")).from_encoder(model_dir, **config)
    if hasattr(model, "attach_generator"):  # DiffCSE: the no-download unigram generator
        model.attach_generator("unigram", tokenizer)
    batch = global_batch(model, tokenizer, n_global, case.get("triplets", False))
    n = n_global // procs
    local = {k: v[rank * n : (rank + 1) * n] for k, v in batch.items()}
    args = TrainingArguments(output_dir=tmp, use_cpu=True, per_device_train_batch_size=n, report_to="none",
                             save_strategy="no", disable_tqdm=True, seed=1234, ddp_backend="gloo" if procs > 1
                             else None)
    trainer = ContrastiveTrainer(model=model, args=args, cached_minibatch_size=case.get("cached"))
    if case.get("fsdp") and procs > 1:
        # FSDP2 as accelerate applies it on GPUs (fully_shard on every transformer layer, then on the root), done
        # by hand: accelerate enables FSDP only on accelerators, and on CPU falls back to DDP (docs/distributed.md)
        from torch.distributed.fsdp import fully_shard

        for layer in [m for m in model.modules() if type(m).__name__ == "BertLayer"]:
            fully_shard(layer)
        wrapped = fully_shard(model)
    else:
        wrapped = trainer.accelerator.prepare(trainer.model)
    trainer.create_optimizer()
    trainer.current_gradient_accumulation_steps = 1
    torch.manual_seed(99)  # the loss's own RNG (GS noise): same stream in every process and run
    for _ in range(case.get("steps", 1)):  # ESimCSE: later steps see the queue the earlier ones filled
        loss = trainer.training_step(wrapped, local)
    # FSDP holds each gradient as a sharded DTensor: its full value, for comparing with one process
    grads = [getattr(p.grad, "full_tensor", lambda g=p.grad: g)().reshape(-1) for p in model.parameters()
             if p.grad is not None]
    metrics_local = copy.deepcopy(trainer._metrics).reduce()  # this process's own values
    metrics = trainer._reduced_metrics()  # what a logging step logs: the mean over processes
    sharded = any(type(p).__name__ == "DTensor" for p in model.parameters())  # FSDP2 really wrapped the model
    return {"loss": float(loss), "grads": torch.cat(grads), "world_size": world_size(), "metrics": metrics,
            "metrics_local": metrics_local, "sharded": sharded,
            "queue": model.queue.contents() if getattr(model, "queue", None) is not None else None}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model_dir", required=True)
    parser.add_argument("--cases", required=True, help="JSON list of cases")
    parser.add_argument("--out", required=True)
    parser.add_argument("--batch", type=int, default=16)
    args = parser.parse_args()
    rank, procs = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    torch.set_num_threads(1)
    tokenizer = AutoTokenizer.from_pretrained(args.model_dir)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for case in json.loads(Path(args.cases).read_text()):
            try:
                results[case["name"]] = run_case(case, args.model_dir, tokenizer, args.batch, rank, procs, tmp)
            except Exception as err:  # reported per case, so one failing loss does not hide the others
                results[case["name"]] = {"error": f"{type(err).__name__}: {err}"}
    Path(args.out).mkdir(parents=True, exist_ok=True)
    torch.save(results, Path(args.out) / f"rank{rank}.pt")


if __name__ == "__main__":
    main()
    # as docs/distributed.md advises a script of one's own: gloo can abort a process at the interpreter's exit
    from hf_cse.distributed import leave_process_group_process

    leave_process_group_process(0)
