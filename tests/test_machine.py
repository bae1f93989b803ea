"""What the machine says of a process, read from /proc: another process's CPU seconds, its time waiting for a CPU,
its start (which tells a reused pid apart), and this thread's own; None for a process that is gone."""

import subprocess
import sys
import time

from lightning_profkit.machine import (cpu_seconds_of, process_start, scheduled_seconds_of, thread_scheduled_seconds,
                                       usable_cpus)


def thread_busy_seconds():
    return sum(s for s in thread_scheduled_seconds() if s is not None)

# a command name with the characters that would break a naive read of /proc/PID/stat
BURN = "open('/proc/self/comm', 'w').write('a) b (c 1 2');\nwhile True: pass"


def test_a_busy_process_is_read_and_a_gone_one_is_none():
    burning = subprocess.Popen([sys.executable, "-c", BURN])
    sleeping = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        time.sleep(1.0)
        ran, waited = scheduled_seconds_of(burning.pid)
        assert waited >= 0.0 and abs(cpu_seconds_of(burning.pid) - ran) < 0.1  # /proc/PID/stat: ticks of 10 ms
        # against each other, not the wall clock (a busy node, a virtual machine's stolen time): the sleeping one ran
        # only its start-up
        assert cpu_seconds_of(sleeping.pid) < 0.3 and scheduled_seconds_of(sleeping.pid)[0] < ran / 2
        assert process_start(burning.pid) <= process_start(sleeping.pid)
    finally:
        for p in (burning, sleeping):
            p.kill()
            p.wait()
    assert cpu_seconds_of(burning.pid) is None and process_start(burning.pid) is None
    assert scheduled_seconds_of(burning.pid) is None


def test_this_threads_busy_time_grows_while_it_computes_and_not_while_it_sleeps():
    """Against the thread's own CPU clock: not the wall clock, which a virtual machine's stolen time stretches (a 0.2 s
    loop was on a CPU or waiting for one 0.11 s of it, the rest taken by the host)."""
    before, cpu = thread_busy_seconds(), time.thread_time()
    time.sleep(0.2)
    slept = thread_busy_seconds() - before
    end = time.perf_counter() + 0.2
    while time.perf_counter() < end:
        pass
    computed = time.thread_time() - cpu
    assert slept < 0.1 and computed > 0.02 and thread_busy_seconds() - before >= 0.9 * computed
    assert 1 <= usable_cpus()
