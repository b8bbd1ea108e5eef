"""A Spark standalone cluster of real processes on 127.0.0.1: one master and
its workers, started from the installed pyspark (``bin/spark-class``), each
a :class:`ManagedProcess` with its own directory and log.

Every port is picked by the kernel (``--port 0``, ``--webui-port 0``) and read
back from the process's log; the web UIs, which standalone daemons always
serve, bind to 127.0.0.1 and are used only for their JSON state. Workers run
executors with this interpreter (``PYSPARK_PYTHON``) and with ``python_path``
(by default the directory zkcoord is imported from) on their ``PYTHONPATH``,
as a deployment with zkcoord installed on every worker would. Their work
directories (one per application and executor, holding the executors' logs)
and scratch space stay under the cluster's directory.

A driver joins with :meth:`SparkStandalone.driver_env`: the master's URL in
``SPARK_MASTER`` (read by :mod:`zkcoord.examples.pipeline`) and a
``SPARK_CONF_DIR`` whose ``spark-defaults.conf`` keeps it on 127.0.0.1.
"""

from __future__ import annotations

import json
import re
import sys
import urllib.request
from pathlib import Path
from typing import Optional, Sequence

from zkcoord.testing.process import ManagedProcess, ProcessExited
from zkcoord.testing.waiting import wait_until

LOOPBACK = "127.0.0.1"
# Every JVM of the cluster and its applications is small and short-lived:
# the serial collector and the client compiler start faster and spend less
# CPU (as the harness's ZooKeeper nodes do).
QUICK_JVM = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"


def spark_home() -> Path:
    """The installed pyspark's directory: bin/spark-class and the jars."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def zkcoord_root() -> Path:
    """The directory zkcoord is imported from, for PYTHONPATH."""
    import zkcoord

    return Path(zkcoord.__file__).resolve().parent.parent


def write_properties(path: Path, properties: dict[str, str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{key} {value}\n" for key, value in properties.items()))
    return path


class SparkDaemon(ManagedProcess):
    """A standalone master or worker JVM. ``start`` waits until its log says
    ``ready`` and reads its ports there."""

    def __init__(self, name: str, directory: Path, main_class: str, args: Sequence[str], env: dict[str, str],
                 ready: str, service: str):
        super().__init__(name, directory, [str(spark_home() / "bin" / "spark-class"), main_class, *args],
                         env=env)
        self.base_command = list(self.command)
        self.master_url: Optional[str] = None  # a worker's master, the last argument
        self.ready = re.compile(ready)
        self.service = service  # 'sparkMaster' or 'sparkWorker', as its log names it
        self.port = 0
        self.ui_port = 0
        self._log_from = 0

    def start(self, timeout: float = 60.0, wait: bool = True) -> "SparkDaemon":
        if self.alive:
            return self
        self._log_from = self.log_path.stat().st_size if self.log_path.exists() else 0
        self.command = [*self.base_command, *([self.master_url] if self.master_url else [])]
        super().start(timeout)
        if wait:
            self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float = 60.0) -> None:
        wait_until(lambda: self._check_alive() and self.ready.search(self.log()), timeout,
                   message=f"{self.name} to be ready", fail_on=(ProcessExited,))
        self.port = int(self.search(rf"service '{self.service}' on port (\d+)"))
        self.ui_port = int(self.search(r"service '(?:Master|Worker)UI' on port (\d+)"))

    def _check_alive(self) -> bool:
        if not self.alive:
            raise ProcessExited(f"{self.name} exited with {self.returncode}:\n{self.log_tail()}")
        return True

    def log(self) -> str:
        """What it logged since it was last started."""
        with open(self.log_path, "rb") as log:
            log.seek(self._log_from)
            return log.read().decode("utf-8", "replace")

    def search(self, pattern: str) -> str:
        match = re.search(pattern, self.log())
        if match is None:
            raise LookupError(f"{self.name} did not log {pattern!r}")
        return match.group(1)

    def state(self) -> dict:
        """The daemon's state, from its web UI's JSON."""
        with urllib.request.urlopen(f"http://{LOOPBACK}:{self.ui_port}/json/", timeout=5) as answer:
            return json.load(answer)

    def stop(self) -> None:
        """SIGTERM (a worker then stops its executors), then kill -9 to
        whatever of its process group is left (executors, their Python workers)."""
        self.terminate(timeout=15)
        self.kill_group()


class SparkStandalone:
    """A master and ``workers`` workers (``cores`` cores and ``memory`` each) under ``directory``."""

    def __init__(self, directory: Path, workers: int = 2, cores: int = 1, memory: str = "1g",
                 python_path: Optional[Sequence[Path]] = None, executor_memory: str = "512m"):
        self.directory = Path(directory)
        self.python_path = [str(p) for p in (python_path if python_path is not None else [zkcoord_root()])]
        self.cores = cores
        self.conf_dir = self.directory / "conf"
        # What the daemons read (they are given this file instead of spark-defaults.conf).
        daemon_conf = write_properties(self.directory / "daemons.conf", {
            "spark.master.rest.enabled": "false",  # no REST submission server (a fixed port)
            "spark.worker.cleanup.enabled": "false",  # keep finished applications' executor logs
        })
        # What an application run against the cluster reads (SPARK_CONF_DIR of its driver).
        write_properties(self.conf_dir / "spark-defaults.conf", {
            "spark.driver.host": LOOPBACK,
            "spark.driver.bindAddress": LOOPBACK,
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.executor.cores": str(cores),
            "spark.executor.memory": executor_memory,
            "spark.cores.max": str(cores * workers),  # one executor on every worker
            # no task before every executor is up, so work spreads over every worker
            "spark.scheduler.minRegisteredResourcesRatio": "1.0",
            "spark.driver.extraJavaOptions": QUICK_JVM,
            "spark.executor.extraJavaOptions": QUICK_JVM,
        })
        common = {
            "SPARK_HOME": str(spark_home()),
            "SPARK_CONF_DIR": str(self.conf_dir),
            "SPARK_LOCAL_IP": LOOPBACK,
            "SPARK_DAEMON_MEMORY": "512m",
            "SPARK_DAEMON_JAVA_OPTS": QUICK_JVM,
        }
        self.master = SparkDaemon(
            "spark master", self.directory / "master", "org.apache.spark.deploy.master.Master",
            ["--host", LOOPBACK, "--port", "0", "--webui-port", "0", "--properties-file", str(daemon_conf)],
            {**common, "SPARK_MASTER_HOST": LOOPBACK}, ready=r"New state: ALIVE", service="sparkMaster")
        self.workers: list[SparkDaemon] = []
        for index in range(1, workers + 1):
            home = self.directory / f"worker-{index}"
            worker_env = {**common, "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": ":".join(self.python_path),
                          "SPARK_LOCAL_DIRS": str(home / "scratch")}
            self.workers.append(SparkDaemon(
                f"spark worker {index}", home, "org.apache.spark.deploy.worker.Worker",
                ["--host", LOOPBACK, "--port", "0", "--webui-port", "0", "--cores", str(cores),
                 "--memory", memory, "--work-dir", str(home / "work"), "--properties-file", str(daemon_conf)],
                worker_env, ready=r"Successfully registered with master", service="sparkWorker"))

    @property
    def url(self) -> str:
        return f"spark://{LOOPBACK}:{self.master.port}"

    def start(self, timeout: float = 90.0) -> "SparkStandalone":
        """The master, then every worker at once; returns once the master counts them all alive."""
        self.master.start(timeout)
        for worker in self.workers:
            worker.master_url = self.url
            worker.start(timeout, wait=False)
        for worker in self.workers:
            worker.wait_ready(timeout)
        wait_until(lambda: self.master.state()["aliveworkers"] == len(self.workers), timeout,
                   message="the master to count every worker alive")
        return self

    def driver_env(self) -> dict[str, str]:
        """The environment of a driver (a PySpark program) run against this cluster."""
        return {
            "SPARK_MASTER": self.url,
            "SPARK_HOME": str(spark_home()),
            "SPARK_CONF_DIR": str(self.conf_dir),
            "SPARK_LOCAL_IP": LOOPBACK,
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            "PYTHONPATH": ":".join(self.python_path),
            "SPARK_LOCAL_DIRS": str(self.directory / "driver-scratch"),
        }

    # -- looking in ---------------------------------------------------------------------------------

    def applications(self) -> dict[str, dict]:
        """Every application the master knows, active or completed, by id."""
        state = self.master.state()
        return {app["id"]: app for app in state["activeapps"] + state["completedapps"]}

    def executors(self, app_id: str) -> dict[str, list[dict]]:
        """The executors each worker ran (or runs) for ``app_id``, by worker name."""
        found = {}
        for worker in self.workers:
            state = worker.state()
            found[worker.name] = [e for e in state["executors"] + state["finishedexecutors"]
                                  if e["appid"] == app_id]
        return found

    def executor_logs(self, app_id: str) -> dict[str, list[Path]]:
        """The stderr of each executor ``app_id`` had, under each worker's work directory, by worker name."""
        return {w.name: sorted((w.directory / "work" / app_id).glob("*/stderr")) for w in self.workers}

    def idle(self) -> bool:
        """No application running, no core in use."""
        state = self.master.state()
        return not state["activeapps"] and state["coresused"] == 0

    def processes(self) -> list[ManagedProcess]:
        return [self.master, *self.workers]

    def close(self) -> None:
        for worker in self.workers:
            worker.stop()
        self.master.stop()

    def __enter__(self) -> "SparkStandalone":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
