"""A device running out of memory while hf-cse-train trains is one line naming the batch size, the sequence length and
the fixes (hf_cse/out_of_memory.py), never a traceback, and the checkpoints the run saved before stay usable."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from helpers import random_sentences

from hf_cse.checkpoints import RUN_RECORD_FILE, checkpoint_problem
from hf_cse.cli import MAX_LINE, run_cli
from hf_cse.cli import train as train_cli
from hf_cse.models import CSEPreTrainedModel, get_method
from hf_cse.out_of_memory import TrainingOutOfMemoryError, out_of_memory_as_refusal

# what torch says on a GPU (the advice on the allocator after the first sentences is cut from the line)
CUDA_MESSAGE = ("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which "
                "1.19 GiB is free. Including non-PyTorch memory, this process has 77.90 GiB memory in use. If reserved "
                "but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
                "fragmentation. See documentation for Memory Management")


def _one_line(capsys, code: int) -> str:
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and len(lines[0]) <= MAX_LINE and " ... " not in lines[0], err  # whole, not cut
    return lines[0]


def _trainer(method: str, tmp_path, batch: int = 512, cached: int | None = None, checkpointing: bool = False):
    """What out_of_memory_as_refusal reads of a ContrastiveTrainer."""
    encoder = SimpleNamespace(is_activation_checkpointing=checkpointing)
    model = SimpleNamespace(config=get_method(method).config_class(), transformer_encoders=lambda: [encoder])
    args = SimpleNamespace(device=torch.device("cuda", 0), per_device_train_batch_size=batch, output_dir=str(tmp_path))
    return SimpleNamespace(accelerator=SimpleNamespace(unwrap_model=lambda m: m), model=model, args=args,
                           cached_minibatch_size=cached)


def _refusal_line(trainer, capsys, error: BaseException = None) -> str:
    def oom():
        with out_of_memory_as_refusal(trainer, max_seq_length=128):
            raise error or torch.OutOfMemoryError(CUDA_MESSAGE)

    return _one_line(capsys, run_cli(oom, "hf-cse-train"))


@pytest.fixture
def no_debug(monkeypatch):
    monkeypatch.delenv("HF_CSE_DEBUG", raising=False)


def test_the_refusal_names_the_batch_the_length_and_the_gradient_cache(tmp_path, capsys, no_debug):
    line = _refusal_line(_trainer("simcse", tmp_path), capsys)
    assert line == ("hf-cse-train: error: cuda:0 ran out of memory (tried to allocate 2.00 GiB) at "
                    "--per_device_train_batch_size 512, --max_seq_length 128: set --cached_minibatch_size=128 (same "
                    "gradient), or lower --per_device_train_batch_size or --max_seq_length. "
                    "(HF_CSE_DEBUG=1 shows the traceback)"), line
    # the cached mode on already: half its mini-batch
    line = _refusal_line(_trainer("simcse", tmp_path, batch=4096, cached=128), capsys)
    assert "at --per_device_train_batch_size 4096 (--cached_minibatch_size 128), --max_seq_length 128" in line, line
    assert "set --cached_minibatch_size=64 (same gradient)" in line, line


def test_a_method_whose_batch_does_not_split_gets_activation_checkpointing(tmp_path, capsys, no_debug):
    line = _refusal_line(_trainer("diffcse", tmp_path), capsys)  # DiffCSE's RTD loss couples the batch's rows
    assert "cached_minibatch_size" not in line, line
    assert "set --activation_checkpointing=True (same gradient), or lower --per_device_train_batch_size or " \
           "--max_seq_length." in line, line
    line = _refusal_line(_trainer("diffcse", tmp_path, checkpointing=True), capsys)  # on already: nothing to set
    assert ": lower --per_device_train_batch_size or --max_seq_length." in line, line


def test_other_devices_out_of_memory_and_other_errors(tmp_path, capsys, no_debug):
    mps = RuntimeError("MPS backend out of memory (MPS allocated: 17.00 GB, other allocations: 1.00 GB).")
    assert "ran out of memory at --per_device_train_batch_size 512" in _refusal_line(_trainer("simcse", tmp_path),
                                                                                      capsys, mps)
    with pytest.raises(RuntimeError, match="a bug"):  # any other RuntimeError keeps its traceback
        with out_of_memory_as_refusal(None, max_seq_length=32):
            raise RuntimeError("a bug")
    with pytest.raises(TrainingOutOfMemoryError) as refused:  # the Python API: a CSEError in the API's terms
        with out_of_memory_as_refusal(_trainer("simcse", tmp_path), max_seq_length=32):
            raise torch.OutOfMemoryError(CUDA_MESSAGE)
    assert "per_device_train_batch_size 512" in str(refused.value) and "--" not in str(refused.value)
    assert isinstance(refused.value.__cause__, torch.OutOfMemoryError)  # HF_CSE_DEBUG=1 shows torch's own
    # torch's CPU allocator counts in bytes
    cpu = RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: you "
                       "tried to allocate 3221225472 bytes. Error code 12 (Cannot allocate memory)")
    assert "ran out of memory (tried to allocate 3.00 GiB) at" in _refusal_line(_trainer("simcse", tmp_path), capsys,
                                                                                 cpu)


@pytest.mark.slow
def test_out_of_memory_in_training_is_one_line_and_the_run_resumes(tiny_bert_dir, tmp_path, capsys, no_debug,
                                                                    monkeypatch):
    """A run saves checkpoint-2, then its third step runs out of memory: one line, exit code 1, checkpoint-2 kept,
    and the fix the line names (the gradient cache) resumes from it."""
    train = tmp_path / "train.txt"
    train.write_text("\n".join(random_sentences(32)) + "\n")
    out = tmp_path / "out"
    args = ["--model_name_or_path", str(tiny_bert_dir), "--train_file", str(train), "--max_steps", "4",
            "--per_device_train_batch_size", "8", "--output_dir", str(out), "--use_cpu", "--disable_tqdm", "true",
            "--save_strategy", "steps", "--save_steps", "2"]
    forward, calls = CSEPreTrainedModel.forward, []

    def runs_out_at_the_third_step(self, *a, **k):
        calls.append(1)
        if len(calls) == 3:
            raise torch.OutOfMemoryError(CUDA_MESSAGE)
        return forward(self, *a, **k)

    monkeypatch.setattr(CSEPreTrainedModel, "forward", runs_out_at_the_third_step)
    line = _one_line(capsys, train_cli.main(args))
    assert line.startswith("hf-cse-train: error: cpu ran out of memory (tried to allocate 2.00 GiB) at "
                           "--per_device_train_batch_size 8, --max_seq_length 32: set --cached_minibatch_size 2 "
                           "(resumes checkpoint-2), or lower --per_device_train_batch_size or --max_seq_length"), line
    assert checkpoint_problem(out / "checkpoint-2") is None and (out / RUN_RECORD_FILE).is_file()

    monkeypatch.setattr(CSEPreTrainedModel, "forward", forward)
    prepare, resumed = train_cli.prepare_output_dir, []
    monkeypatch.setattr(train_cli, "prepare_output_dir", lambda *a, **k: resumed.append(prepare(*a, **k)) or resumed[0])
    assert train_cli.main([*args, "--cached_minibatch_size", "2"]) == 0, capsys.readouterr().err
    assert resumed == [str(out / "checkpoint-2")]
    assert (out / "checkpoint-4").is_dir() and (out / "model.safetensors").is_file()


def test_out_of_memory_scoring_the_dev_data_names_the_dev_batch(capsys, no_debug):
    """It named the training batch, the length and the gradient cache, none of which scoring holds in memory."""
    from hf_cse.out_of_memory import dev_out_of_memory_as_refusal

    def oom():
        with dev_out_of_memory_as_refusal(torch.device("cuda", 0), 128):
            raise torch.OutOfMemoryError(CUDA_MESSAGE)

    line = _one_line(capsys, run_cli(oom, "hf-cse-train"))
    assert line == ("hf-cse-train: error: cuda:0 ran out of memory (tried to allocate 2.00 GiB) scoring the dev data "
                    "in batches of 128: set --per_device_eval_batch_size=64 (the training is the same with it). "
                    "(HF_CSE_DEBUG=1 shows the traceback)"), line
    # never transformers' default 8, which the dev scoring reads as not set (batches of 128); none below 1
    for batch, fix in ((16, "set per_device_eval_batch_size=4 "), (1, "no smaller batch is left")):
        with pytest.raises(TrainingOutOfMemoryError, match=f"in batches of {batch}: {fix}"):
            with dev_out_of_memory_as_refusal(torch.device("cuda", 0), batch):
                raise torch.OutOfMemoryError(CUDA_MESSAGE)


def test_the_dev_batch_is_the_eval_batch_given_and_128_for_transformers_default():
    """A batch below 128 was raised to 128, so a device short of memory had no smaller one to turn to."""
    from transformers import TrainingArguments

    from hf_cse.out_of_memory import TRANSFORMERS_EVAL_BATCH
    from hf_cse.trainer_evaluation import dev_batch_size

    assert TrainingArguments("o").per_device_eval_batch_size == TRANSFORMERS_EVAL_BATCH
    assert dev_batch_size(TrainingArguments("o")) == 128  # transformers' default 8
    assert dev_batch_size(TrainingArguments("o", per_device_eval_batch_size=32)) == 32
    assert dev_batch_size(TrainingArguments("o", per_device_eval_batch_size=512)) == 512
