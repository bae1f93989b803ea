"""The Lightning variety: run modes, loops, namespaces and LightningCLI, with a real Trainer each."""

import os
import subprocess
import sys

import pytest
import torch
from torch.utils.data import DataLoader

from conftest import SleepDataset, SleepIterable, TinyModel, leftovers, make_trainer, profiler_steps, read_trace, trace_files
from lightning_profkit import PerformanceMonitor

HERE = os.path.dirname(os.path.abspath(__file__))


def windows(root):
    out = {}
    for path in trace_files(root):
        out.setdefault(os.path.basename(os.path.dirname(path)), []).extend(profiler_steps(read_trace(path)))
    return out


class ManualModel(TinyModel):
    def __init__(self, dataset):
        super().__init__(dataset)
        self.automatic_optimization = False

    def training_step(self, batch, batch_idx):
        opt = self.optimizers()
        opt.zero_grad()
        loss = self.layer(batch).pow(2).mean()
        self.manual_backward(loss)
        opt.step()


class ValModel(TinyModel):
    def val_dataloader(self):
        return DataLoader(SleepDataset(8), batch_size=2)

    def test_step(self, batch, batch_idx):
        self.log("test_loss", self.layer(batch).pow(2).mean())


def no_trouble(root):
    return leftovers(root) == [] and not torch.autograd.profiler._is_profiler_enabled


@pytest.mark.parametrize(
    "monitor_kwargs, trainer_kwargs, model, expected",
    [
        (dict(), dict(fast_dev_run=True), lambda: TinyModel(SleepDataset(40)), {"epoch=0000-batch=000000": [0]}),  # 1 batch
        (dict(), dict(limit_train_batches=5), lambda: TinyModel(SleepDataset(40)), {"epoch=0000-batch=000002-000004": [2, 3, 4]}),
        (dict(steps="8-12"), dict(max_steps=10), lambda: TinyModel(SleepDataset(40)), {"epoch=0000-batch=000008-000009": [8, 9]}),
        (dict(), dict(), lambda: TinyModel(SleepIterable(40)), {"epoch=0000-batch=000011-000013": [11, 12, 13]}),
        (dict(steps="3-4"), dict(), lambda: ManualModel(SleepDataset(40)), {"epoch=0000-batch=000003-000004": [3, 4]}),
        (dict(steps="3-4"), dict(num_sanity_val_steps=2, limit_val_batches=2), lambda: ValModel(SleepDataset(40)),
         {"epoch=0000-batch=000003-000004": [3, 4]}),
    ],
    ids=["fast_dev_run", "limit_train_batches", "max_steps-inside-a-window", "iterable-without-len",
         "manual-optimization", "sanity-check"],
)
def test_run_modes(tmp_path, monitor_kwargs, trainer_kwargs, model, expected):
    trainer = make_trainer(tmp_path, [PerformanceMonitor(alert_threshold=None, **monitor_kwargs)], **trainer_kwargs)
    trainer.fit(model())
    assert trainer.state.finished and windows(tmp_path) == expected and no_trouble(tmp_path)


def test_several_fit_calls_on_one_trainer(tmp_path):
    monitor = PerformanceMonitor(alert_threshold=None)
    trainer = make_trainer(tmp_path, [monitor])
    model = TinyModel(SleepDataset(40))
    trainer.fit(model)
    trainer.fit_loop.max_epochs = 2
    trainer.fit(model)
    assert windows(tmp_path) == {"epoch=0000-batch=000011-000013": [11, 12, 13], "epoch=0001-batch=000011-000013": [31, 32, 33]}
    assert type(trainer.profiler).__name__ == "PassThroughProfiler" and no_trouble(tmp_path)


def test_validate_and_test_only(tmp_path):
    monitor = PerformanceMonitor()
    trainer = make_trainer(tmp_path, [monitor])
    model = ValModel(SleepDataset(40))
    trainer.validate(model)
    trainer.test(model, DataLoader(SleepDataset(8), batch_size=2))
    assert trace_files(tmp_path) == [] and type(trainer.profiler).__name__ == "PassThroughProfiler"
    assert no_trouble(tmp_path)


def test_pytorch_lightning_namespace(tmp_path):
    """A user of the `pytorch_lightning` package adds the same callback to its Trainer."""
    pl = pytest.importorskip("pytorch_lightning")

    class Model(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(8, 1)

        def training_step(self, batch, batch_idx):
            return self.layer(batch).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

        def train_dataloader(self):
            return DataLoader(SleepDataset(40, delay=0.001), batch_size=2)

    logger = pl.loggers.TensorBoardLogger(str(tmp_path), name="tb")
    monitor = PerformanceMonitor(steps="2-3", alert_threshold=None)
    trainer = pl.Trainer(max_epochs=1, logger=logger, enable_checkpointing=False, enable_progress_bar=False,
                         callbacks=[monitor], default_root_dir=str(tmp_path))
    trainer.fit(Model())
    assert windows(tmp_path) == {"epoch=0000-batch=000002-000003": [2, 3]}
    assert monitor.trace_dir == os.path.join(logger.log_dir, "profiler")  # found the TensorBoard run folder
    assert type(trainer.profiler).__name__ == "PassThroughProfiler" and no_trouble(tmp_path)


def run_cli(tmp_path, init_args):
    tmp_path.mkdir(exist_ok=True)
    config = tmp_path / "config.yaml"
    config.write_text(
        "trainer:\n  max_epochs: 1\n  accelerator: cpu\n  devices: 1\n  logger: false\n"
        "  enable_checkpointing: false\n  enable_progress_bar: false\n"
        f"  default_root_dir: {tmp_path}\n  callbacks:\n    - class_path: lightning_profkit.PerformanceMonitor\n"
        "      init_args:\n" + "".join(f"        {k}: {v}\n" for k, v in init_args.items())
    )
    return subprocess.run([sys.executable, os.path.join(HERE, "cli_script.py"), "fit", "--config", str(config)],
                          capture_output=True, text=True, timeout=300)


def test_configured_from_yaml_through_lightning_cli(tmp_path):
    pytest.importorskip("jsonargparse")
    done = run_cli(tmp_path, {"steps": '"2-3"', "alert_threshold": "null", "alert_action": "stop", "record_shapes": "true"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert windows(tmp_path) == {"epoch=0000-batch=000002-000003": [2, 3]}
    done = run_cli(tmp_path / "bad", {"alert_threshold": "2"})
    assert done.returncode != 0 and "alert_threshold" in done.stderr


def test_validation_batches_from_yaml_through_lightning_cli(tmp_path):
    pytest.importorskip("jsonargparse")
    done = run_cli(tmp_path, {"steps": '"2-3"', "validation_batches": '"1-2"', "alert_threshold": "null"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert windows(tmp_path) == {"epoch=0000-batch=000002-000003": [2, 3], "epoch=0000-batch=000019-val-batch=000001-000002": [1, 2]}
    done = run_cli(tmp_path / "bad", {"validation_batches": '"2-1"'})
    assert done.returncode != 0 and "validation_batches" in done.stderr


def test_credentials_in_a_yaml_config_are_said_before_lightning_cli_stores_them(tmp_path):
    """LightningCLI writes every argument, ``storage_options`` included, to the run folder's config.yaml: a key or a
    secret there is said in one warning at setup (they belong in the environment or the store's profile); an endpoint
    alone is not."""
    pytest.importorskip("jsonargparse")
    secret = "{key: AKIAEXAMPLE, secret: hunter2hunter2, client_kwargs: {aws_session_token: tok-123}}"
    done = run_cli(tmp_path, {"steps": '"2-3"', "alert_threshold": "null", "storage_options": secret})
    assert done.returncode == 0, done.stderr[-3000:]
    said = [line for line in done.stderr.splitlines() if "holds credentials" in line]
    assert len(said) == 1 and "(key, secret, client_kwargs.aws_session_token)" in said[0], done.stderr[-3000:]
    assert "hunter2hunter2" in "".join(p.read_text() for p in tmp_path.rglob("config.yaml"))  # what it warns of
    assert "hunter2hunter2" not in done.stderr + done.stdout
    done = run_cli(tmp_path / "endpoint", {"steps": '"2-3"', "alert_threshold": "null",
                                           "storage_options": "{client_kwargs: {endpoint_url: http://127.0.0.1:9}}"})
    assert done.returncode == 0 and "holds credentials" not in done.stderr, done.stderr[-3000:]
