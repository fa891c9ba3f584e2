"""hf_cse's errors: a loader worker's refusal keeps its fields; a mistyped name gets the setting it meant."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from hf_cse.errors import CSEError, closest_name, unwrapped_from_worker


class _Refusing(Dataset):
    def __len__(self):
        return 2

    def __getitem__(self, i):
        raise CSEError("max_seq_length 8 is too short for this row; raise it.", fields=("max_seq_length",))


@pytest.mark.parametrize("workers", [0, 1])
def test_a_refusal_raised_in_a_loader_worker_keeps_its_message_and_fields(workers):
    """torch re-raises a worker's error from its type and traceback text: the fields (what the command line turns
    into flags) come back with the message."""
    with pytest.raises(CSEError) as raised:
        next(iter(DataLoader(_Refusing(), num_workers=workers, multiprocessing_context="fork" if workers else None)))
    error = unwrapped_from_worker(raised.value)
    assert str(error) == "max_seq_length 8 is too short for this row; raise it."
    assert error.fields == ("max_seq_length",)
    assert (error.__cause__ is raised.value) == bool(workers)


def test_outside_a_worker_an_error_carries_no_note():
    assert not getattr(CSEError("x", fields=("a",)), "__notes__", None)
    assert torch.utils.data.get_worker_info() is None


@pytest.mark.parametrize("name, names, meant", [
    ("lr", ["learning_rate", "r", "lora_r"], "learning_rate"),  # the closest spelling is LoRA's r
    ("--lr", ["--learning_rate", "--r"], "--learning_rate"),
    ("--batch-size", ["--per_device_train_batch_size", "--max_steps"], "--per_device_train_batch_size"),
    ("lr", ["r"], "r"),  # a shorthand's setting that is not offered: the closest spelling
    ("lerning_rate", ["learning_rate", "r"], "learning_rate"),
    ("zzz", ["learning_rate"], None),
])
def test_closest_name_knows_the_usual_shorthands(name, names, meant):
    assert closest_name(name, names) == meant
