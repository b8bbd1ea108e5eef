"""Reading a process's metrics endpoint as Prometheus does: over HTTP, parsed
with prometheus_client's own parser of the text exposition."""

from __future__ import annotations

import urllib.request
from typing import Iterable, Mapping

from prometheus_client.parser import text_string_to_metric_families


class Scrape:
    """One scrape's samples, looked up by sample name and labels."""

    def __init__(self, text: str):
        self.text = text
        self.samples = [sample for family in text_string_to_metric_families(text) for sample in family.samples]

    def matching(self, name: str, **labels: str) -> Iterable:
        return (s for s in self.samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))

    def value(self, name: str, **labels: str) -> float:
        """The sum of ``name``'s samples whose labels include ``labels`` (0 if none)."""
        return sum(s.value for s in self.matching(name, **labels))

    def has(self, name: str) -> bool:
        return any(s.name == name for s in self.samples)

    def by_label(self, name: str, label: str) -> Mapping[str, float]:
        return {s.labels[label]: s.value for s in self.matching(name)}


def scrape(port: int, host: str = "127.0.0.1", timeout: float = 5.0) -> Scrape:
    """GET http://host:port/metrics and parse it."""
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=timeout) as response:
        return Scrape(response.read().decode())
