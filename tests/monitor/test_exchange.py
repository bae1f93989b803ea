"""The exchange over our own gloo group, with two real ranks (processes) on this machine."""

import socket
import time

import torch.distributed as dist
import torch.multiprocessing as mp

from lightning_profkit.monitor.exchange import close_group, exchange_group, exchange_named

ROUNDS = 20


def _rank(rank, port, answers):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    for round_ in range(ROUNDS):  # a group made, used and freed every round, as each fit does
        group = exchange_group(2)
        seen = [exchange_named(group, {"rank": float(rank), "round": float(round_)}, ("rank", "round")),
                exchange_named(group, {"b": float(rank), **({"a": 1.0} if rank else {})}, ("a", "b"))]
        close_group(group)
        del group  # before torch 2.8, freeing a group whose gloo threads held a gather's last tensors hung here
    answers.put((rank, seen))
    dist.destroy_process_group()


def test_every_rank_gets_every_ranks_values_and_a_freed_group_never_hangs():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    context = mp.get_context("spawn")
    answers = context.SimpleQueue()
    ranks = mp.start_processes(_rank, args=(port, answers), nprocs=2, join=False, start_method="spawn")
    deadline = time.monotonic() + 300  # a hang, not a speed: 20 rounds take a few seconds
    try:
        while not ranks.join(timeout=1):
            assert time.monotonic() < deadline, "the ranks hung"
    finally:
        for process in ranks.processes:
            if process.is_alive():
                process.kill()
    got = dict(answers.get() for _ in range(2))
    last = ROUNDS - 1
    assert got[0] == got[1] == [[{"rank": 0.0, "round": last}, {"rank": 1.0, "round": last}],
                                [{"b": 0.0}, {"a": 1.0, "b": 1.0}]]  # by name: what a rank lacks is absent


def test_typed_figures_travel_by_name_and_come_back_typed():
    """A dataclass's fields as named figures and back: ints stay ints, None stays absent, and a
    rank that sent nothing for a needed field gives None."""
    from lightning_profkit.monitor.alerting.checks import BlockFigures
    from lightning_profkit.monitor.exchange import figures_of, made_from, names_of
    from lightning_profkit.monitor.timing.loader_busy import WorkersBusy

    busy = WorkersBusy(0.25, 2, 3.0, queued=0.5)
    sent = figures_of(busy, "workers.")
    assert sent == {"workers.share": 0.25, "workers.workers": 2.0, "workers.seconds": 3.0, "workers.queued": 0.5}
    back = made_from(WorkersBusy, exchange_named(None, sent, names_of(WorkersBusy, "workers."))[0], "workers.", rank=1)
    assert back == WorkersBusy(0.25, 2, 3.0, 1, 0.5) and isinstance(back.workers, int)
    assert made_from(WorkersBusy, {"workers.share": 0.25}, "workers.") is None and figures_of(None) == {}
    block = BlockFigures(1.0, 2.0, 0.0)
    assert made_from(BlockFigures, figures_of(block)) == block
