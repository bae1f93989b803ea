"""The exchange over our own gloo group, with two real ranks (processes) on this machine."""

import socket
import time

import torch.distributed as dist
import torch.multiprocessing as mp

from lightning_profkit.monitor.exchange import close_group, exchange, exchange_group, exchange_named

ROUNDS = 20


def _rank(rank, port, answers):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    for round_ in range(ROUNDS):  # a group made, used and freed every round, as each fit does
        group = exchange_group(2)
        seen = [exchange(group, [float(rank), float(round_)]), exchange(group, [rank * 10.0, 1.0, 2.0]),
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
    assert got[0] == got[1] == [[[0.0, last], [1.0, last]], [[0.0, 1.0, 2.0], [10.0, 1.0, 2.0]],
                                [{"b": 0.0}, {"a": 1.0, "b": 1.0}]]  # by name: what a rank lacks is absent
