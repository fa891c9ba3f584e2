"""The logging window open at a checkpoint, as a resumed run's whole-run loss reads it (hf_cse.log_window)."""

from types import SimpleNamespace

import torch

from hf_cse.log_window import log_window_file, loss_before


def _state(step: int):
    # logged at steps 2 and 4 (window means 1.0 and 3.0); the checkpoint at step 5 has one step open
    return SimpleNamespace(global_step=step, log_history=[{"step": 2, "loss": 1.0}, {"step": 4, "loss": 3.0}])


def _save(folder, process: int, world_size: int, loss_sum: float, last_logged: int = 4) -> None:
    torch.save({"loss_sum": torch.tensor(loss_sum), "last_logged_step": last_logged, "world_size": world_size,
                "metrics": {}}, log_window_file(folder, process, world_size))


def test_the_open_window_of_several_processes_counts_as_their_mean_as_a_logged_loss_does(tmp_path):
    """Each process saves its own running sum (a local term such as the masked-LM loss differs between them); every
    process takes the processes' mean, as transformers logs a window, not its own."""
    _save(tmp_path, 0, 2, 4.0)
    _save(tmp_path, 1, 2, 6.0)
    for process in (0, 1):
        args = SimpleNamespace(world_size=2, process_index=process)
        assert loss_before(tmp_path, _state(5), args) == 2 * 1.0 + 2 * 3.0 + 5.0


def test_an_open_window_some_process_did_not_save_is_unknown(tmp_path):
    _save(tmp_path, 0, 2, 4.0)
    assert loss_before(tmp_path, _state(5), SimpleNamespace(world_size=2, process_index=0)) is None
    _save(tmp_path, 1, 2, 6.0, last_logged=2)  # another window's
    assert loss_before(tmp_path, _state(5), SimpleNamespace(world_size=2, process_index=0)) is None
    assert loss_before(tmp_path, _state(4), SimpleNamespace(world_size=2, process_index=1)) == 8.0  # none open
