"""Run by test_variety.py: the callback configured from YAML through LightningCLI."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/, for conftest
from lightning.pytorch.cli import LightningCLI  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

from conftest import SleepDataset, TinyModel  # noqa: E402


class CliModel(TinyModel):
    def __init__(self, size: int = 40, val_size: int = 8) -> None:
        super().__init__(SleepDataset(size))
        self.val_size = val_size

    def val_dataloader(self):
        return DataLoader(SleepDataset(self.val_size), batch_size=2)


if __name__ == "__main__":
    LightningCLI(CliModel, save_config_kwargs={"overwrite": True})
