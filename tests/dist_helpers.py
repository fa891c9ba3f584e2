"""What the multi-process tests share (tests/trainer/test_distributed.py, tests/trainer/test_distributed_runs.py,
tests/data/test_sampler.py, tests/models/test_esimcse.py, tests/export/test_st_integration.py,
tests/losses/test_matryoshka.py): the worker scripts, their environment, a free port for their rendezvous, the
commands that launch two CPU processes, and the check that two processes computing a loss on their halves of a
batch see the global batch."""

from __future__ import annotations

import os
import socket
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORKER = Path(__file__).parent / "dist_worker.py"
API_WORKER = Path(__file__).parent / "dist_api_worker.py"  # a user's own ContrastiveTrainer script


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false", PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]))
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _gathered_loss_worker(rank: int, port: int, out: str, loss: str, loss_kwargs: dict, views: int) -> None:
    """One of two processes: its half of a seeded float64 global batch through sentence-transformers' ``CSELoss``
    (which gathers the batch); its loss and local gradients saved to ``out/rank<rank>.pt``."""
    import torch
    import torch.distributed as dist

    from hf_cse.integrations.sentence_transformers import CSELoss

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        g = torch.Generator().manual_seed(11)
        z = [torch.randn(8, 6, generator=g, dtype=torch.float64) for _ in range(views)]  # the global batch
        local = [t[rank * 4:(rank + 1) * 4].clone().requires_grad_(True) for t in z]
        value = CSELoss(torch.nn.Identity(), loss, **loss_kwargs).compute_loss_from_embeddings(local)
        value.backward()
        torch.save({"loss": value.item(), "grads": [t.grad for t in local]}, f"{out}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def assert_two_processes_see_the_global_batch(out: Path, loss: str, loss_kwargs: dict, views: int,
                                              single_process_loss) -> None:
    """Two processes each compute ``CSELoss(loss, **loss_kwargs)`` on their half of the same seeded global batch of
    ``views`` columns: each one's loss is ``single_process_loss(z)`` on the whole batch, and its local gradient P x
    the single-process one (DDP's average over the P processes then gives exactly the single-process gradient)."""
    import torch
    import torch.multiprocessing as mp

    mp.spawn(_gathered_loss_worker, args=(_free_port(), str(out), loss, loss_kwargs, views), nprocs=2, join=True)
    g = torch.Generator().manual_seed(11)
    z = [torch.randn(8, 6, generator=g, dtype=torch.float64).requires_grad_(True) for _ in range(views)]
    full = single_process_loss(z)
    full.backward()
    for rank in range(2):
        got = torch.load(out / f"rank{rank}.pt")
        assert abs(got["loss"] - full.item()) < 1e-12
        for mine, whole in zip(got["grads"], z):
            torch.testing.assert_close(mine / 2, whole.grad[rank * 4:(rank + 1) * 4], atol=1e-12, rtol=1e-10)


CPU_2PROC = ROOT / "hf_cse" / "configs" / "accelerate" / "cpu_2proc.yaml"


def accelerate_train_cmd(*args: str) -> list[str]:
    """``accelerate launch`` of the training command (``-m hf_cse train``, what ``run_unsup.py`` runs) as two CPU
    processes, with the shipped cpu_2proc config, on a free port."""
    import sys

    return [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(CPU_2PROC),
            "--main_process_port", str(_free_port()), "-m", "hf_cse", "train", "--use_cpu", "true",
            "--disable_tqdm", "true", *args]


def torchrun_cmd(script: Path, *args: str) -> list[str]:
    """``torchrun --nproc_per_node 2 script args...`` (two CPU processes, gloo) on a free port."""
    import sys

    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
            "--master_port", str(_free_port()), str(script), *args]
