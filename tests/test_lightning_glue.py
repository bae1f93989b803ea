"""The Lightning side of the callback on real Trainers: the run's trace folder by its loggers, a folder of its own
where another fit's traces are, the fit's last step, and hooks set only while
needed."""

import os

from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

from conftest import make_trainer
from lightning_profkit.internals import SET_WHILE_NEEDED, rehook, unhook
from lightning_profkit.lightning_glue import last_step, own_trace_dir, trace_dir


def test_the_trace_folder_is_the_first_loggers_run_folder_or_one_of_its_own(tmp_path):
    tb = make_trainer(tmp_path, [], logger=[CSVLogger(tmp_path, name="csv"), TensorBoardLogger(tmp_path, name="tb")])
    assert trace_dir(tb) == os.path.join(str(tmp_path), "tb", "version_0", "profiler")  # TensorBoard's, for its tab
    csv = make_trainer(tmp_path, [], logger=CSVLogger(tmp_path, name="csv"))
    assert trace_dir(csv) == os.path.join(str(tmp_path), "csv", "version_0", "profiler")
    none = [trace_dir(make_trainer(tmp_path, [])) for _ in range(2)]
    assert all(os.path.basename(p).startswith("run=") for p in none) and none[0] != none[1]


def test_a_folder_with_an_earlier_fits_windows_gets_a_run_folder_under_it(tmp_path):
    trainer = make_trainer(tmp_path, [])
    assert own_trace_dir(trainer, str(tmp_path / "traces")) == (str(tmp_path / "traces"), None)
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / "epoch=3-step=400.ckpt").write_bytes(b"")  # a checkpoint of Lightning's is not a window
    assert own_trace_dir(trainer, str(tmp_path / "traces")) == (str(tmp_path / "traces"), None)
    for window in ("epoch=0000-batch=000010-000012", "step=000010-000012-epoch=0"):  # as named now, and before
        (tmp_path / "traces" / window).mkdir()
        folder, why = own_trace_dir(trainer, str(tmp_path / "traces"))
        assert os.path.dirname(folder) == str(tmp_path / "traces") and why == "an earlier fit's traces are there"
        (tmp_path / "traces" / window).rmdir()


def test_the_last_step_is_known_from_max_epochs_or_max_steps(tmp_path):
    for kwargs, last in (({"max_epochs": 3}, 14), ({"max_epochs": 3, "max_steps": 4}, 3),
                         ({"max_epochs": -1, "max_steps": 4, "accumulate_grad_batches": 2}, 7),
                         ({"max_epochs": -1}, None)):
        trainer = make_trainer(tmp_path, [], **kwargs)
        trainer.fit_loop.max_batches = 5  # what the fit loop counts in its loader when it starts
        assert last_step(trainer) == last, kwargs


def test_hooks_set_while_needed_are_none_between():
    from lightning_profkit import PerformanceMonitor

    monitor = PerformanceMonitor()
    assert all(getattr(monitor, hook) is None for hook in SET_WHILE_NEEDED)
    rehook(monitor, "on_train_batch_end")
    assert callable(monitor.on_train_batch_end) and monitor.on_validation_batch_start is None
    unhook(monitor)
    assert monitor.on_train_batch_end is None
