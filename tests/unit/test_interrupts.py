"""Ctrl-C reaches a command whatever SIGINT's disposition was when it started.

Each case runs a fresh interpreter as a shell's background job starts one,
with SIGINT ignored (which exec keeps, and under which Python installs no
KeyboardInterrupt handler of its own), then sends it SIGINT.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from zkcoord.testing import as_background_job, wait_until


def background(script: str) -> subprocess.Popen:
    return subprocess.Popen(as_background_job([sys.executable, "-c", script]), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def interrupt_when_ready(proc: subprocess.Popen) -> tuple[str, str]:
    """Wait for the child's "ready" line, send it SIGINT, return what it printed."""
    try:
        assert proc.stdout.readline() == "ready\n", proc.stderr.read()
        proc.send_signal(signal.SIGINT)
        return proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def catches(pid: int, signum: int) -> bool:
    """Whether process ``pid`` has a handler installed for ``signum`` (/proc's SigCgt mask)."""
    status = Path(f"/proc/{pid}/status").read_text()
    mask = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")), 16)
    return bool(mask & (1 << (signum - 1)))


def runs(pid: int, command: list[str]) -> bool:
    """Whether process ``pid`` runs ``command`` (its launcher has exec'd it)."""
    return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1] == [arg.encode() for arg in command]


def test_a_background_job_starts_with_sigint_ignored():
    done = subprocess.run(as_background_job([sys.executable, "-c", "import signal; "
                                             "print(signal.getsignal(signal.SIGINT) is signal.SIG_IGN)"]),
                          capture_output=True, text=True, timeout=30)
    assert done.stdout == "True\n", done.stderr


def test_interruptible_raises_keyboard_interrupt_where_sigint_was_ignored():
    out, err = interrupt_when_ready(background(
        "import signal, time\n"
        "from zkcoord.interrupts import Interruptible\n"
        "try:\n"
        "    with Interruptible():\n"
        "        print('ready', flush=True)\n"
        "        time.sleep(60)  # the work Ctrl-C interrupts\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted')\n"
        "print('restored' if signal.getsignal(signal.SIGINT) is signal.SIG_IGN else 'not restored')\n"))
    assert out == "interrupted\nrestored\n", err


def test_a_shielded_clean_up_runs_to_its_end():
    out, err = interrupt_when_ready(background(
        "import os, signal, time\n"
        "from zkcoord.interrupts import Interruptible\n"
        "with Interruptible() as stop:\n"
        "    try:\n"
        "        print('ready', flush=True)\n"
        "        time.sleep(60)\n"
        "    except KeyboardInterrupt:\n"
        "        stop.shield()\n"
        "        os.kill(os.getpid(), signal.SIGTERM)  # a second stop signal, mid clean-up\n"
        "        os.kill(os.getpid(), signal.SIGINT)\n"
        "        print('cleaned up')\n"))
    assert out == "cleaned up\n", err


def test_on_stop_in_a_gevent_process_calls_back_in_a_greenlet():
    out, err = interrupt_when_ready(background(
        "from gevent import monkey\n"
        "monkey.patch_all()\n"
        "import gevent, gevent.event\n"
        "from zkcoord.interrupts import on_stop\n"
        "done = gevent.event.Event()\n"
        "def stop():\n"
        "    gevent.sleep(0.01)  # it may block, as a server's stop does\n"
        "    done.set()\n"
        "on_stop(stop, greenlet=True)\n"
        "print('ready', flush=True)\n"
        "print('stopped' if done.wait(60) else 'not stopped')\n"))
    assert out == "stopped\n", err


def test_a_zkcoord_command_started_as_a_background_job_stops_on_ctrl_c():
    # `topics list` on a ZooKeeper that is not there waits 15 s for it: long
    # enough to be interrupted, as the demo or `zk up` would be.
    command = [sys.executable, "-m", "zkcoord.cli", "topics", "list", "--zookeeper", "127.0.0.1:1"]
    proc = subprocess.Popen(as_background_job(command), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        # The launcher's own interpreter catches SIGINT for a moment before it
        # ignores it and execs: wait for the command's.
        wait_until(lambda: runs(proc.pid, command) and catches(proc.pid, signal.SIGINT), timeout=10,
                   message="the command to catch SIGINT")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=10) == 130, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
