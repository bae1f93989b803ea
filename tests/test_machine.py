"""What the machine says of a process, read from /proc: another process's CPU seconds, its time waiting for a CPU,
its start (which tells a reused pid apart), and this thread's own; None for a process that is gone."""

import subprocess
import sys
import time

from lightning_profkit.machine import (cpu_seconds_of, process_start, scheduled_seconds_of, thread_busy_seconds,
                                       usable_cpus)

# a command name with the characters that would break a naive read of /proc/PID/stat
BURN = "open('/proc/self/comm', 'w').write('a) b (c 1 2');\nwhile True: pass"


def test_a_busy_process_is_read_and_a_gone_one_is_none():
    burning = subprocess.Popen([sys.executable, "-c", BURN])
    sleeping = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        time.sleep(1.0)
        ran, waited = scheduled_seconds_of(burning.pid)  # on a CPU or ready for one all the time, however busy the node
        assert ran + waited >= 0.9 and abs(cpu_seconds_of(burning.pid) - ran) < 0.1  # /proc/PID/stat: ticks of 10 ms
        assert cpu_seconds_of(sleeping.pid) < 0.3 and scheduled_seconds_of(sleeping.pid)[0] < 0.3
        assert process_start(burning.pid) <= process_start(sleeping.pid)
    finally:
        for p in (burning, sleeping):
            p.kill()
            p.wait()
    assert cpu_seconds_of(burning.pid) is None and process_start(burning.pid) is None
    assert scheduled_seconds_of(burning.pid) is None


def test_this_threads_busy_time_grows_while_it_computes_and_not_while_it_sleeps():
    before = thread_busy_seconds()
    time.sleep(0.2)
    slept = thread_busy_seconds() - before
    end = time.perf_counter() + 0.2
    while time.perf_counter() < end:
        pass
    assert slept < 0.1 and thread_busy_seconds() - before >= 0.15  # on a CPU or waiting for one: the 0.2 s of the loop
    assert 1 <= usable_cpus()
