"""hf_cse/run_files.py names what a training run writes without importing transformers; its checkpoint folders'
prefix must stay the Trainer's."""

from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from hf_cse.run_files import CHECKPOINT_PREFIX


def test_checkpoint_folders_are_named_as_the_trainer_names_them():
    assert CHECKPOINT_PREFIX == PREFIX_CHECKPOINT_DIR
