"""The Java member driver's build and its typed refusals (zkcoord.testing.java_members,
zkcoord/java.py): no JVM is started here."""

from __future__ import annotations

import os
import zipfile

import pytest

from zkcoord import java
from zkcoord.testing import java_members
from zkcoord.testing.kafka_jars import KafkaNotInstalled


def test_without_kafkas_jars_the_driver_is_refused_with_the_install_hint(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    with pytest.raises(java_members.MemberDriverUnavailable, match="install.sh kafka") as refused:
        java_members.JavaMembers(tmp_path / "run", ["t"], {"group.id": "g"})
    assert isinstance(refused.value, KafkaNotInstalled)  # caught as any missing Kafka is


def test_without_java_the_driver_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(java_members.MemberDriverUnavailable, match="no java"):
        java_members.driver_command(["--topics", "t"], heap_mb=64)


def test_a_cached_jar_is_built_once_per_digest_of_its_sources_and_replaces_the_older(tmp_path):
    sources = tmp_path / "src"
    (sources / "demo").mkdir(parents=True)
    (sources / "demo" / "Hello.java").write_text("package demo; public class Hello {}\n")
    (sources / "hello.properties").write_text("greeting = hello\n")

    def jar():
        return tmp_path / "jars" / f"hello-{java.source_digest(sources)[:12]}.jar"

    first = java.cached_jar(sources, lambda: [], jar(), "17", replaces="hello-*.jar")
    with zipfile.ZipFile(first) as built:
        assert {"demo/Hello.class", "hello.properties"} <= set(built.namelist())
    built_at = first.stat().st_mtime_ns
    assert java.cached_jar(sources, lambda: pytest.fail("no build, no classpath"), jar(), "17",
                           replaces="hello-*.jar").stat().st_mtime_ns == built_at
    (sources / "demo" / "Hello.java").write_text("package demo; public class Hello { int n; }\n")
    second = java.cached_jar(sources, lambda: [], jar(), "17", replaces="hello-*.jar")
    assert second != first and sorted(os.listdir(tmp_path / "jars")) == [second.name]
    (sources / "demo" / "Hello.java").write_text("package demo; public class Hello { nonsense }\n")
    with pytest.raises(java.JavaBuildError, match="javac failed"):
        java.cached_jar(sources, lambda: [], jar(), "17", replaces="hello-*.jar")
    assert sorted(os.listdir(tmp_path / "jars")) == [second.name]  # a failed build leaves nothing behind
