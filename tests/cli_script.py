"""Run by test_variety.py: the callback configured from YAML through LightningCLI."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lightning.pytorch.cli import LightningCLI  # noqa: E402

from conftest import SleepDataset, TinyModel  # noqa: E402


class CliModel(TinyModel):
    def __init__(self, size: int = 40) -> None:
        super().__init__(SleepDataset(size))


if __name__ == "__main__":
    LightningCLI(CliModel, save_config_kwargs={"overwrite": True})
