"""The advice on a loop fed by litdata's StreamingDataLoader, which runs torch's worker iterator inside its own."""

import time
import warnings

import pytest
import torch
from conftest import TinyModel, make_trainer

from lightning_profkit import PerformanceMonitor

litdata = pytest.importorskip("litdata")


def sample_of(i):
    return torch.full((8,), float(i))


class SlowStream(litdata.StreamingDataset):
    """Each sample 10 ms of sleep: workers that wait, as on a bucket."""

    def __getitem__(self, index):
        time.sleep(0.01)
        return super().__getitem__(index)


class Streamed(TinyModel):
    def train_dataloader(self):
        return litdata.StreamingDataLoader(SlowStream(self.dataset), batch_size=2, num_workers=2)


def test_the_advice_reads_the_workers_of_litdatas_streaming_loader(tmp_path):
    """Its workers are read as a DataLoader's are, and the shard advice for an IterableDataset, which litdata shards
    itself, is left out."""
    data = str(tmp_path / "data")
    litdata.optimize(fn=sample_of, inputs=list(range(160)), output_dir=data, chunk_bytes="64KB", num_workers=1,
                     mode="overwrite")
    got = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        make_trainer(tmp_path, [PerformanceMonitor(profile=False, alert_window=10, on_alert=got.append)]).fit(
            Streamed(data))
    (alert,) = got
    assert any(line.startswith("measured: 2 workers: busy") for line in alert.advice), alert.advice
    assert not any("could not be read" in line or "IterableDataset" in line for line in alert.advice), alert.advice
