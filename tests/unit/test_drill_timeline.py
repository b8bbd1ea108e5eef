"""The drill's timeline page, rendered from histories built by hand: it must
parse, show every partition, fault and violation, escape what it is given,
and stay small for a long drill."""

from __future__ import annotations

import random
import xml.etree.ElementTree as ET

import pytest

from zkcoord.drill.checker import Duplicate, OffsetRegression, Verdict, check
from zkcoord.drill.history import Delivery, FaultRecord, History, OwnershipEvent, Produced
from zkcoord.drill.timeline import render_timeline

SVG = "{http://www.w3.org/2000/svg}"
T0 = 1_700_000_000.0
TOPIC = "orders"
A = "host-aaaaaa111111"
B = "host-bbbbbb222222"
EVIL = "evil-<script>alert(1)</script>"


def tp(partition: int) -> tuple[str, int]:
    return (TOPIC, partition)


def deliver(member: str, partition: int, offset: int, at: float) -> Delivery:
    return Delivery(member, TOPIC, partition, offset, began=T0 + at, returned=T0 + at + 0.05)


def start(member: str, at: float, *partitions: int) -> OwnershipEvent:
    return OwnershipEvent(member, T0 + at, True, tuple(tp(p) for p in partitions))


def stop(member: str, at: float, *partitions: int) -> OwnershipEvent:
    return OwnershipEvent(member, T0 + at, False, tuple(tp(p) for p in partitions))


def small_history() -> History:
    """A owns both partitions; a planned join hands orders:1 to B; while A is
    paused, EVIL is started on orders:0, and A delivers once more on waking."""
    deliveries = ([deliver(A, 0, o, 1 + o) for o in range(5)] + [deliver(A, 1, o, 2 + o) for o in range(3)]
                  + [deliver(B, 1, o, 9 + o) for o in range(3, 6)]
                  + [deliver(EVIL, 0, o, 21 + o) for o in range(5, 8)]
                  + [deliver(A, 0, 8, 30.2)])
    events = [start(A, 0, 0, 1), stop(A, 10.5, 1), start(B, 11, 1), start(EVIL, 25, 0), stop(A, 30.5, 0)]
    faults = [
        FaultRecord(1, "member-join", "consumer-2", planned=True, injected=T0 + 10, restored=T0 + 10,
                    recovery_from=T0 + 10, whole_at=T0 + 12, bound_s=10.0, rejoined_at=T0 + 12),
        FaultRecord(2, "consumer-pause-long", "consumer-1", planned=False, injected=T0 + 20, restored=T0 + 30,
                    recovery_from=T0 + 30, whole_at=T0 + 45, bound_s=10.0, rejoined_at=T0 + 45, note="paused past <session> & resumed"),
    ]
    produced = [Produced(d.topic, d.partition, d.offset, i, d.began - 0.5) for i, d in enumerate(deliveries)]
    return History(produced=produced, deliveries=deliveries, events=sorted(events, key=lambda e: e.ts),
                   samples=[], faults=faults, started=T0, ended=T0 + 31)


@pytest.fixture(scope="module")
def page() -> str:
    history = small_history()
    verdict = check(history)
    assert len(verdict.double_ownership) == 1, "the history is built to hold one double ownership"
    return render_timeline(history, verdict, "drill <seed 7>")


@pytest.fixture(scope="module")
def root(page) -> ET.Element:
    return ET.fromstring(page)


def chart(root: ET.Element) -> ET.Element:
    return root.find(".//div[@class='chart']/" + SVG + "svg")


def row_labels(root: ET.Element) -> list[str]:
    labels = root.find(".//div[@class='rows']/" + SVG + "svg")
    return ["".join(t.itertext()).replace(title_of(t), "") for t in labels.iter(SVG + "text")]


def classes(element: ET.Element) -> set[str]:
    return set(element.get("class", "").split())


def title_of(element: ET.Element) -> str:
    title = element.find(SVG + "title")
    return "" if title is None else "".join(title.itertext())


def test_the_page_is_well_formed_xml_with_nothing_fetched(page, root):
    assert root.tag == "html"
    assert root.find(".//div[@class='chart']/" + SVG + "svg") is not None
    assert "<script" not in page and "http://" not in page.replace("http://www.w3.org/2000/svg", "")
    assert page.isascii()


def test_the_header_shows_the_title_verdict_and_summary(page, root):
    assert root.find("head/title").text == "drill <seed 7>"  # escaped in the page, whole once parsed
    assert "drill &lt;seed 7&gt;" in page
    assert "FAIL" in "".join(root.find("body").itertext())
    assert check(small_history()).summary_line() in "".join(root.itertext())


def test_every_partition_has_a_row_in_order(root):
    assert row_labels(root) == ["orders:0", "orders:1"]
    assert len([r for r in chart(root).iter(SVG + "rect") if "rowbg" in classes(r)]) == 2


def test_tenures_run_from_start_to_stop_or_the_last_delivery(root):
    bars = [title_of(r) for r in chart(root).iter(SVG + "rect") if any(c.startswith("m") for c in classes(r))]
    assert any(t.startswith(f"{A} owned orders:1 from 0.0 s to 10.5 s, ended by Stop") for t in bars)
    assert f"{B} owned orders:1 from 11.0 s to 14.0 s, ended by its last delivery (no Stop)" in bars
    assert len(bars) == 4  # A on both, B on 1, EVIL on 0


def test_the_double_ownership_is_a_red_bar_in_its_row(root):
    svg = chart(root)
    episodes = [r for r in svg.iter(SVG + "rect") if "vbar" in classes(r)]
    assert len(episodes) == 1
    episode = episodes[0]
    assert float(episode.get("width")) >= 2
    assert float(episode.get("y")) < 24, "orders:0 is the first row"
    assert "double ownership of orders:0" in title_of(episode) and A in title_of(episode)


def test_each_fault_has_a_band_and_the_slow_one_is_outlined(root):
    bands = [r for r in chart(root).iter(SVG + "rect") if classes(r) & {"fault", "planned"}]
    assert [sorted(classes(b)) for b in bands] == [["planned"], ["fault", "slow"]]
    assert "held 10.0 s, whole after 15.0 s (bound 10.0 s); paused past <session> & resumed" in title_of(bands[1])
    labels = ["".join(t.itertext()) for t in chart(root).iter(SVG + "text")]
    assert any(label.endswith("#1 member-join") for label in labels)
    assert any(label.endswith("#2 consumer-pause-long") for label in labels)


def test_the_fault_table_has_a_row_per_fault(root):
    rows = root.findall(".//table/tbody/tr")
    assert len(rows) == 2
    assert [td.text for td in rows[1].findall("td")][:4] == ["2", "consumer-pause-long", "fault", "consumer-1"]
    assert rows[1].get("class") == "late"


def legend(root: ET.Element) -> dict[str, str]:
    """Full member id -> the name the legend shows."""
    svg = root.find(".//" + SVG + "svg[@class='legend']")
    return {title_of(g): "".join(g.find(SVG + "text").itertext()) for g in svg.iter(SVG + "g")
            if g.find(SVG + "title") is not None}


def test_member_ids_are_escaped_and_shortened_in_the_legend(page, root):
    assert EVIL not in page
    assert "evil-&lt;script&gt;alert(1)&lt;/script&gt;" in page
    entries = legend(root)
    assert entries[A] == "\u2026111111"
    assert set(entries) == {A, B, EVIL}


def test_short_names_grow_until_they_differ():
    history = History(produced=[], deliveries=[deliver(m, 0, 0, 1) for m in ("x-aaa123456", "y-bbb123456", "abc")],
                      events=[], samples=[], faults=[])
    entries = legend(ET.fromstring(render_timeline(history, check(history), "names")))
    assert entries == {"x-aaa123456": "\u2026a123456", "y-bbb123456": "\u2026b123456", "abc": "abc"}


def test_an_empty_history_still_makes_a_page():
    history = History(produced=[], deliveries=[], events=[], samples=[], faults=[])
    root = ET.fromstring(render_timeline(history, check(history), "nothing"))
    assert "no partitions in the history" in "".join(chart(root).itertext())
    assert "FAIL" in "".join(root.itertext())  # a drill that recorded nothing proved nothing


def test_violations_in_one_pixel_are_one_marker():
    history = small_history()
    at = T0 + 5
    duplicates = [Duplicate(tp(1), o, B, at + o * 1e-4, fault=None, planned=False, below_committed=100)
                  for o in range(50)]
    verdict = Verdict(faults=[], produced=0, delivered=0, samples=0, lost=[(tp(1), 7)], undelivered=0,
                      duplicates=duplicates, double_ownership=[], deliveries_after_stop=[],
                      offset_regressions=[OffsetRegression(tp(0), 9, 4, at)], commits_ahead=[])
    svg = chart(ET.fromstring(render_timeline(history, verdict, "markers")))
    markers = [p for p in svg.iter(SVG + "path") if "v" in classes(p)]
    assert len(markers) == 2
    assert any("below the committed offset 100" in title_of(m) and "and 49 more here" in title_of(m)
               for m in markers)
    assert any("went back from 9 to 4" in title_of(m) for m in markers)
    assert any("".join(t.itertext()).endswith("1 lost") for t in svg.iter(SVG + "text"))


def long_history(deliveries: int, partitions: int, members: int, faults: int) -> History:
    """A long drill: members replaced one after another, each delivering every partition it owns."""
    rng = random.Random(1)
    duration = 3600.0
    ids = [f"host-{rng.getrandbits(48):012x}" for _ in range(members)]
    tenure = duration / members
    events, records = [], []
    per_member = deliveries // members
    for i, member in enumerate(ids):
        begin = i * tenure
        events.append(OwnershipEvent(member, T0 + begin, True, tuple(tp(p) for p in range(partitions))))
        events.append(OwnershipEvent(member, T0 + begin + tenure - 0.5, False,
                                     tuple(tp(p) for p in range(partitions))))
        for k in range(per_member):
            at = begin + (k + 0.5) * (tenure - 1) / per_member
            records.append(deliver(member, k % partitions, i * per_member + k, at))
    fault_list = [FaultRecord(n, "consumer-kill" if n % 3 else "member-join", f"consumer-{n % 5}", n % 3 == 0,
                              injected=T0 + n * 17, restored=T0 + n * 17 + 3, recovery_from=T0 + n * 17,
                              whole_at=T0 + n * 17 + 6, bound_s=5.0, rejoined_at=T0 + n * 17 + 6,
                              note=f"note {n}")
                  for n in range(faults)]
    return History(produced=[], deliveries=records, events=events, samples=[], faults=fault_list,
                   started=T0, ended=T0 + duration)


def test_a_long_drill_makes_a_small_page():
    history = long_history(deliveries=200_000, partitions=12, members=40, faults=200)
    verdict = Verdict(faults=history.faults, produced=0, delivered=len(history.deliveries), samples=0, lost=[],
                      undelivered=0, duplicates=[], double_ownership=[], deliveries_after_stop=[],
                      offset_regressions=[], commits_ahead=[])
    page = render_timeline(history, verdict, "long drill")
    size = len(page.encode())
    assert size < 1_500_000, f"the page is {size:,} bytes for 200,000 deliveries, 12 partitions, 200 faults"
    svg = chart(ET.fromstring(page))
    assert row_labels(ET.fromstring(page)) == [f"orders:{p}" for p in range(12)], "rows sort by number, not as text"
    assert len([r for r in svg.iter(SVG + "rect") if classes(r) & {"fault", "planned"}]) == 200
