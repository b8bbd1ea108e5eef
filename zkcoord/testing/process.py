"""A managed process: one real child process of the harness, with its own
directory and log, readiness by port file, and the faults a machine can
suffer (kill -9, SIGSTOP and SIGCONT, SIGTERM).

Every process the harness starts is remembered in ``ManagedProcess.started``
so a test runner can attach the tail of each log to a failing test, whoever
started it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import ClassVar, Mapping, Optional, Sequence

from zkcoord.errors import ZkcoordError
from zkcoord.readiness import read_port_file
from zkcoord.testing.waiting import wait_until


class ClusterError(ZkcoordError):
    """A process of a local cluster did not start or stop as expected."""


class ProcessExited(ClusterError):
    """A process exited while something waited for it to serve."""


def zkcoord_command(*args: str) -> list[str]:
    """The `zkcoord` command line, run by this interpreter (no PATH lookup)."""
    return [sys.executable, "-m", "zkcoord.cli", *args]


# A shell starts a background job (`make test &`, a CI step) with SIGINT
# ignored, and an ignored signal stays ignored across exec. This launcher does
# the same for one command, whoever runs the harness.
_SIGINT_IGNORED = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); "
                   "os.execvp(sys.argv[1], sys.argv[1:])")


def as_background_job(command: Sequence[str]) -> list[str]:
    """``command`` as a shell's background job would run it: with SIGINT
    ignored from the start. A test that sends Ctrl-C starts its process so,
    to hold whatever sends it to the same start however the test was run."""
    return [sys.executable, "-c", _SIGINT_IGNORED, *command]


def cpu_seconds(pid: int) -> float:
    """User plus system CPU seconds that process ``pid`` has used so far (from /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def exit_on_signal(signum, _frame) -> None:
    """A signal handler for harness scripts: SIGTERM (from `timeout`, say) ends
    the script like Ctrl-C, so its clean-up runs; the processes it started
    have sessions of their own and would outlive it otherwise."""
    # `timeout` signals the script and then its process group: a second
    # SystemExit in the middle of the clean-up would cut it short.
    signal.signal(signum, signal.SIG_IGN)
    raise SystemExit(128 + signum)


class ManagedProcess:
    """One child process. ``port_file``, when given, is the readiness file the
    process writes once it serves (``--port-file``); ``start`` then waits for
    it and ``ports`` holds what it says. ``env`` holds variables set for it on
    top of the harness's own environment. Its output goes to its log, or,
    with ``stdout_name``, its stdout to that file beside the log (a program
    whose stdout is data); with ``commands``, its stdin is a pipe the harness
    writes to (``proc.stdin``), else it reads nothing."""

    started: ClassVar[list["ManagedProcess"]] = []

    def __init__(self, name: str, directory: Path, command: Sequence[str],
                 port_file: Optional[Path] = None, log_name: str = "process.log",
                 env: Optional[Mapping[str, str]] = None, stdout_name: Optional[str] = None,
                 commands: bool = False):
        self.name = name
        self.directory = Path(directory)
        self.command = list(command)
        self.port_file = port_file
        self.log_path = self.directory / log_name
        self.env = dict(env or {})
        self.stdout_path = None if stdout_name is None else self.directory / stdout_name
        self.commands = commands
        self.proc: Optional[subprocess.Popen] = None
        self.ports: dict[str, int] = {}
        self.paused = False
        self.stopped_at: Optional[float] = None  # time.time() when it last went down, for log dumps

    # -- life -----------------------------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> "ManagedProcess":
        """Start it (again) and, if it has a port file, wait until it serves."""
        if self.alive:
            return self
        self.directory.mkdir(parents=True, exist_ok=True)
        if self.port_file is not None:
            self.port_file.unlink(missing_ok=True)
        with open(self.log_path, "ab") as log, open(self.stdout_path or os.devnull, "ab") as output:
            self.proc = subprocess.Popen(
                self.command, stdin=subprocess.PIPE if self.commands else subprocess.DEVNULL,
                stdout=output if self.stdout_path else log, stderr=log if self.stdout_path else subprocess.STDOUT,
                env={**os.environ, **self.env} if self.env else None,
                start_new_session=True,  # a Ctrl-C meant for the harness is not theirs
            )
        self.paused = False
        self.stopped_at = None
        if self not in ManagedProcess.started:
            ManagedProcess.started.append(self)
        if self.port_file is not None:
            self.ports = wait_until(self._read_ports, timeout, message=f"{self.name} to serve",
                                    fail_on=(ProcessExited,))
        return self

    def _read_ports(self) -> Optional[dict[str, int]]:
        if not self.alive:
            raise ProcessExited(f"{self.name} exited with {self.proc.returncode if self.proc else None}:\n"
                               f"{self.log_tail()}")
        try:
            return read_port_file(self.port_file)
        except (OSError, ValueError):
            return None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise ClusterError(f"{self.name} was never started")
        return self.proc.pid

    @property
    def returncode(self) -> Optional[int]:
        return None if self.proc is None else self.proc.poll()

    # -- faults ---------------------------------------------------------------------------------

    def kill(self) -> None:
        """kill -9: a crash."""
        if self.alive:
            self.proc.send_signal(signal.SIGCONT)  # a paused process must be able to die
            self.proc.kill()
            self.proc.wait(10)
        self._went_down()

    def signal_group(self, signum: int) -> None:
        """Send ``signum`` to the process and every process it started (its
        session's process group, which start gave it), such as a Spark
        driver's JVM and Python workers."""
        if self.proc is None:
            raise ClusterError(f"{self.name} was never started")
        try:
            os.killpg(self.proc.pid, signum)
        except (ProcessLookupError, PermissionError):
            pass  # nothing of the group is left

    def kill_group(self) -> None:
        """kill -9 to the whole process group: a machine losing a program and its children at once."""
        if self.proc is not None:
            self.signal_group(signal.SIGKILL)
        self.kill()

    def terminate(self, timeout: float = 20.0) -> Optional[int]:
        """SIGTERM: a clean shutdown, then kill -9 if it lingers. Returns the exit code."""
        if self.alive:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        self._went_down()
        return self.returncode

    def signal(self, signum: int) -> None:
        if self.proc is None:
            raise ClusterError(f"{self.name} was never started")
        self.proc.send_signal(signum)  # does nothing once the process is reaped, unlike os.kill(pid)

    def pause(self) -> None:
        """SIGSTOP: the process holds its sockets and sessions but runs nothing."""
        self.signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        self.signal(signal.SIGCONT)
        self.paused = False

    def _went_down(self) -> None:
        self.paused = False
        if self.stopped_at is None:
            self.stopped_at = time.time()

    # -- looking in -------------------------------------------------------------------------------

    def log_tail(self, max_bytes: int = 6000) -> str:
        try:
            with open(self.log_path, "rb") as log:
                log.seek(0, os.SEEK_END)
                log.seek(max(0, log.tell() - max_bytes))
                return log.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def cpu_seconds(self) -> float:
        return cpu_seconds(self.pid)

    def scrape(self):
        """Its metrics endpoint, read now: a server or broker started with
        ``--metrics-port`` reports the port in its port file."""
        from zkcoord.testing.scrape import scrape

        if "metrics_port" not in self.ports:
            raise ClusterError(f"{self.name} serves no metrics (start it with --metrics-port)")
        return scrape(self.ports["metrics_port"])

    def __repr__(self) -> str:
        state = "paused" if self.paused else "alive" if self.alive else "down"
        return f"<{type(self).__name__} {self.name} {state}>"
