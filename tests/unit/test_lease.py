"""The coordinator's fences: who may still fetch what, and until when."""

from __future__ import annotations

from zkcoord.coordinator.lease import Fences, lease_end

A, B, C = ("t", 0), ("t", 1), ("t", 2)


def test_a_lease_ends_a_session_timeout_and_the_margin_after_the_last_send():
    assert lease_end(100.0, 10_000, 200) == 110.2


def test_fenced_partitions_are_free_only_once_every_holder_s_lease_has_ended():
    fences = Fences()
    fences.fence("m1", {A, B}, until=10.0)
    fences.fence("m2", {B}, until=12.0)
    assert fences.until(now=5.0) == 12.0
    assert fences.until(now=5.0, partitions=[A]) == 10.0
    assert fences.until(now=5.0, partitions=[C]) is None
    assert fences.until(now=10.0) == 12.0  # m1's lapsed, m2's holds B
    assert fences.until(now=12.0) is None
    assert not fences


def test_a_fence_is_never_shortened_by_a_later_one():
    fences = Fences()
    fences.fence("m1", {A}, until=10.0)
    fences.fence("m1", {A}, until=8.0)
    assert fences.until(now=0.0) == 10.0


def test_a_holder_that_registers_again_frees_what_it_held():
    fences = Fences()
    fences.fence("m1", {A, B}, until=10.0)
    fences.fence("m2", {B}, until=10.0)
    fences.release("m1")
    assert fences.until(now=0.0, partitions=[A]) is None
    assert fences.until(now=0.0, partitions=[B]) == 10.0
    assert fences.holders() == {"m2"}


def test_a_holder_ran_its_partitions_last_until_someone_is_started_on_them_however_late():
    fences = Fences()
    fences.fence("m1", {A, B, C}, until=10.0)
    fences.fence("m2", {B}, until=10.0)
    fences.release("m1", [C])  # stopped and reported: nothing more to hand over
    assert fences.until(now=20.0) is None  # every fence has lapsed...
    assert fences.last_ran_by("m1") == {A, B}  # ...but nobody has run A or B since
    assert fences.last_ran_by("m2") == {B}
    fences.claimed([B])
    assert fences.last_ran_by("m1") == {A} and fences.last_ran_by("m2") == frozenset()
    fences.release("m1")
    assert fences.last_ran_by("m1") == frozenset()


class CountedId(str):
    """A member id that counts how often it is looked up."""

    lookups = 0

    def __hash__(self):
        CountedId.lookups += 1
        return str.__hash__(self)


def test_a_member_back_is_looked_up_among_its_own_partitions_only():
    # A successor fences every partition of a group it takes over; each of
    # 20,000 members registering again must not go through 20,000 of them
    # (400 million steps, minutes of the coordinator's only thread).
    fences = Fences()
    for n in range(10_000):
        fences.fence(f"m{n}", {("t", n)}, until=10.0)
    me = CountedId("m7")
    assert fences.last_ran_by(me) == {("t", 7)}
    fences.release(me)
    assert CountedId.lookups < 20
    assert fences.last_ran_by("m7") == frozenset() and fences.until(now=0.0, partitions=[("t", 7)]) is None
    assert fences.until(now=0.0) == 10.0 and len(fences.holders()) == 9_999
    # The index forgets holders whose fences and traces have all gone.
    fences.claimed([("t", n) for n in range(10_000)])
    assert fences.until(now=11.0) is None and not fences._named_on
