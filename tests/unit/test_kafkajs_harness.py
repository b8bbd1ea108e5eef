"""The KafkaJS harness's typed refusals (zkcoord.testing.kafkajs): without
the install step's KafkaJS or without Node.js, a test is told what to run
instead of skipping. No Node process is started here."""

from __future__ import annotations

import pytest

from zkcoord.testing import kafkajs
from zkcoord.testing.process import ClusterError


def test_without_the_installed_kafkajs_the_members_are_refused_with_the_install_hint(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    with pytest.raises(kafkajs.KafkaJsUnavailable, match="install.sh test") as refused:
        kafkajs.KafkaJsMembers(tmp_path / "run", "127.0.0.1:9092", "g", ["t"])
    assert isinstance(refused.value, ClusterError)  # caught as any harness failure is
    with pytest.raises(kafkajs.KafkaJsUnavailable, match="not installed"):
        kafkajs.admin_call("127.0.0.1:9092", "listGroups")


def test_without_node_kafkajs_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(kafkajs.KafkaJsUnavailable, match="no node"):
        kafkajs.node()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    with pytest.raises(kafkajs.KafkaJsUnavailable, match="no npm"):
        kafkajs.install()


def test_the_install_lives_under_a_digest_of_the_pinned_project(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    path = kafkajs.install_path()
    assert path.parent == tmp_path / "zkcoord" / "kafkajs" and len(path.name) == 12
    assert '"kafkajs": "2.2.4"' in (kafkajs.DRIVER / "package.json").read_text()
