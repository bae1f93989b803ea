"""Run by test_ddp.py: 2-process DDP on CPU (gloo); rank 1's data is slower than rank 0's."""

import json
import os
import sys

import torch
from lightning.pytorch.loggers import CSVLogger

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/, for conftest
from conftest import SleepDataset, TinyModel, make_trainer  # noqa: E402

from lightning_profkit import PerformanceMonitor  # noqa: E402


def rank():
    return torch.distributed.get_rank() if torch.distributed.is_initialized() else int(os.environ.get("LOCAL_RANK", "0"))


class AlertLog:
    """on_alert hook (a picklable object, for ddp_spawn): one JSON line per alert, per rank."""

    def __init__(self, root):
        self.root = root

    def __call__(self, alert):
        with open(os.path.join(self.root, f"alerts-rank{rank()}.jsonl"), "a") as f:
            f.write(json.dumps(alert.as_dict()) + "\n")


class RankDataset(SleepDataset):
    def __getitem__(self, i):
        self.delay = 0.001 if rank() == 0 else 0.02  # a straggler by far more than a busy machine moves the ranks
        return super().__getitem__(i)


if __name__ == "__main__":
    # ROOT STRATEGY [RANKS [DIRPATH]]; strategy "nodes": this process is one node of two (one device each), the
    # node rank and the master's address in the environment as a cluster launcher sets them
    root, strategy = sys.argv[1], sys.argv[2]
    ranks = [int(r) for r in sys.argv[3].split(",")] if len(sys.argv) > 3 and sys.argv[3] else None
    dirpath = sys.argv[4] if len(sys.argv) > 4 else None
    torch.set_num_threads(1)
    monitor = PerformanceMonitor(steps="3-5", alert_window=5, alert_patience=1, on_alert=AlertLog(root), ranks=ranks,
                                 dirpath=dirpath)
    layout = dict(num_nodes=2, devices=1, strategy="ddp") if strategy == "nodes" else dict(devices=2, strategy=strategy)
    trainer = make_trainer(root, [monitor], max_epochs=2, accelerator="cpu", logger=CSVLogger(root, name="csv"), **layout)
    trainer.fit(TinyModel(RankDataset(40)))
    # the callback's own gloo group is gone: only the world's is left (see monitor/exchange.py)
    print(f"process groups after fit: {len(torch.distributed.distributed_c10d._world.pg_map)}", flush=True)
