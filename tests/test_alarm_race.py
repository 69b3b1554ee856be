"""time_limit never leaves an alarm armed behind it.

An alarm that arrives just before time_limit's `finally` disarms the timer is
handled just after: if its handler re-armed the timer, the alarm would fire once
SIGALRM's previous action (the default: exit) is back, and the kernel would die
with "Alarm clock". Very short limits, many times, hit that window within a few
hundred runs on the code that had the bug.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

LOOP = """
import random, signal, sys, time
from helpers.safety import CheckTimeout, time_limit

random.seed(0)
end, runs = time.monotonic() + 3, 0
while time.monotonic() < end:
    try:
        with time_limit(random.uniform(1e-6, 5e-5)):  # expires around the end of the block
            pass
    except CheckTimeout:
        pass
    runs += 1
    if signal.getsignal(signal.SIGALRM) is signal.SIG_DFL and signal.getitimer(signal.ITIMER_REAL) != (0.0, 0.0):
        print(f"an alarm is armed with the default action after {runs} runs", flush=True)
        sys.exit(3)
print(f"{runs} runs, no alarm left armed", flush=True)
"""


def test_tiny_limits_never_leave_an_alarm_armed():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # A subprocess: the bug kills the process, which must fail this test, not the pytest worker.
    done = subprocess.run([sys.executable, "-c", LOOP], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    killed = done.returncode == -signal.SIGALRM
    assert done.returncode == 0, "killed by SIGALRM ('Alarm clock')" if killed else done.stdout + done.stderr
    assert "no alarm left armed" in done.stdout
