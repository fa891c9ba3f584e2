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


def test_a_window_is_taken_up_by_every_process_or_by_none(tmp_path, monkeypatch, caplog):
    """Process 1's file missing from a two-process checkpoint (a partial copy): process 0 took up its window alone,
    the metrics reduced over a restored window and an empty one were NaN, and the run stopped as diverged at every
    resume. Each process's finding is decided on together (stood in for here: the other process has no file)."""
    import hf_cse.log_window as log_window
    from hf_cse.resume_processes import saved_world_size

    _save(tmp_path, 0, 2, 4.0)
    (tmp_path / "rng_state_0.pth").write_bytes(b"")
    asked = []
    monkeypatch.setattr(log_window, "on_every_process", lambda args, holds: asked.append(holds) or False)
    window = log_window.LogWindow()
    with caplog.at_level("WARNING", logger="hf_cse.log_window"):
        window.resume_from(str(tmp_path), _state(5), SimpleNamespace(world_size=2, process_index=0))
    assert asked == [True] and window._saved is None  # its own file was there; the other process's was not
    assert "holds no running loss of step 5 (the window of a process of the run is missing)" in caplog.text
    _save(tmp_path, 1, 2, 6.0)
    assert saved_world_size(tmp_path) == 2  # rng_state_1.pth missing: the windows' files still say two processes
    monkeypatch.setattr(log_window, "on_every_process", lambda args, holds: holds)
    window.resume_from(str(tmp_path), _state(5), SimpleNamespace(world_size=2, process_index=0))
    assert window._saved is not None and window._saved["loss_sum"] == 4.0
