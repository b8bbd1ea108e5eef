"""Without Java or the cached jars the harness says what to run, in a
typed error, before starting anything; a half-copied release is not used;
without Maven the install step says what to install."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from zkcoord.testing import kafka_jars
from zkcoord.testing.kafka import KRAFT_MODE, ZOOKEEPER_MODE, KafkaCluster, KafkaSettings
from zkcoord.testing.kafka_jars import KafkaNotInstalled


@pytest.mark.parametrize("mode", [ZOOKEEPER_MODE, KRAFT_MODE])
def test_an_empty_jar_cache_says_to_run_the_install_step(mode, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    with pytest.raises(KafkaNotInstalled, match="run scripts/install.sh kafka"):
        KafkaCluster(tmp_path / "kafka", KafkaSettings(mode), zookeeper="127.0.0.1:2181/t")


def test_no_java_says_to_run_the_install_step(tmp_path, monkeypatch):
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-jdk"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(KafkaNotInstalled, match="no java found.*run scripts/install.sh kafka"):
        kafka_jars.java()


def test_a_release_counts_as_cached_only_when_every_jar_listed_is_there(tmp_path):
    release = tmp_path / "3.9.1"
    release.mkdir()
    (release / "classpath.txt").write_text("./kafka_2.13-3.9.1.jar:./zookeeper-3.8.4.jar")
    (release / "kafka_2.13-3.9.1.jar").write_bytes(b"jar")
    with pytest.raises(KafkaNotInstalled, match="no Kafka 3.9 release is cached"):
        kafka_jars.classpath("3.9", root=tmp_path)

    (release / "zookeeper-3.8.4.jar").write_bytes(b"jar")
    version, jars = kafka_jars.classpath("3.9", root=tmp_path)
    assert version == "3.9.1"
    assert [jar.name for jar in jars] == ["kafka_2.13-3.9.1.jar", "zookeeper-3.8.4.jar"]


def test_the_newest_cached_release_of_a_line_is_used():
    assert kafka_jars.newest(["3.9.1", "3.9.10", "4.4.0", "4.10.0", "3.8.0"], "3.9") == "3.9.10"
    assert kafka_jars.newest(["3.9.1", "4.4.0", "4.10.0"], "4") == "4.10.0"
    assert kafka_jars.newest(["3.9.1"], "4") is None


def test_the_maven_project_fetches_one_release_per_line():
    assert sorted(kafka_jars.release_line(v) for v in kafka_jars.project_versions()) == ["0.10", "3.9", "4"]


def test_a_bad_cluster_size_is_refused():
    with pytest.raises(kafka_jars.ClusterError, match="min.insync.replicas 3 must be 1 to 2"):
        KafkaSettings(ZOOKEEPER_MODE, brokers=2, min_insync_replicas=3)


def test_the_install_step_without_maven_says_what_to_install_and_fetches_nothing(tmp_path):
    # The entry point scripts/install.sh runs, with an empty cache and no mvn on PATH.
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "PATH": str(tmp_path)}
    done = subprocess.run([sys.executable, "-m", "zkcoord.testing.kafka_jars"], capture_output=True, text=True,
                          env=env, timeout=60)
    assert done.returncode == 1
    assert "zkcoord: no mvn: install Maven (Debian's maven; scripts/install.sh spark or kafka does)" in done.stderr
    assert not (tmp_path / "cache" / "zkcoord" / "kafka").exists()


def _cache_release(root, version: str, jars: list[str]) -> None:
    release = root / version
    release.mkdir(parents=True)
    for jar in jars:
        (release / jar).write_bytes(b"jar")
    (release / "classpath.txt").write_text(":".join(f"./{jar}" for jar in jars))


def test_a_release_cached_before_its_module_declared_a_jar_is_fetched_again(tmp_path):
    declared = {v: kafka_jars.declared_jars(pom) for v, pom in kafka_jars.project_modules().items()}
    assert "kafka-tools-4.4.0.jar" in declared["4.4.0"]
    for version, jars in declared.items():
        _cache_release(tmp_path, version, sorted(jars))
    assert kafka_jars.stale_versions(root=tmp_path) == []
    (tmp_path / "4.4.0" / "classpath.txt").write_text("./kafka_2.13-4.4.0.jar")  # cached before kafka-tools
    assert kafka_jars.stale_versions(root=tmp_path) == ["4.4.0"]


def test_kafkas_tools_without_their_jar_say_to_run_the_install_step(tmp_path, monkeypatch):
    from zkcoord.testing import kafka_tools

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(kafka_tools, "_runtime", None)
    _cache_release(tmp_path / "zkcoord" / "kafka", "4.4.0", ["kafka_2.13-4.4.0.jar"])
    with pytest.raises(KafkaNotInstalled, match="lacks its command-line tools.*run scripts/install.sh kafka"):
        kafka_tools.run_tool(kafka_tools.TOPICS, ["--version"])


def test_a_kafka_tool_past_its_timeout_is_killed_with_what_it_printed(tmp_path):
    from zkcoord.testing import kafka_tools

    kafka_tools.runtime()  # the real jars, or KafkaNotInstalled
    with pytest.raises(kafka_tools.KafkaToolError, match="ran past 4 s; killed"):
        # Nothing listens on port 9 of this host: the consumer waits for a broker for ever.
        kafka_tools.run_tool(kafka_tools.CONSOLE_CONSUMER, ["--bootstrap-server", "127.0.0.1:9", "--topic", "t"],
                             timeout=4, log_dir=tmp_path)
    failed = kafka_tools.run_tool(kafka_tools.TOPICS, ["--no-such-option"], check=False)
    assert failed.returncode != 0 and "no-such-option" in failed.output
