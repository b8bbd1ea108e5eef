"""The login decisions on a manual clock: failures limited per address and
per user, successful checks remembered by a key that changes with the
stored credential."""

from __future__ import annotations

import dataclasses

from zkcoord.security import logins, scram
from zkcoord.security.logins import CheckCache, FailureLimiter, check_key


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_failures_in_a_row_up_to_the_burst_then_one_per_refill():
    clock = Clock()
    limiter = FailureLimiter(burst=3, refill_s=2.0, clock=clock)
    for _ in range(2):
        assert limiter.refusal("10.0.0.7", "alice") is None
        assert limiter.failed("10.0.0.7", "alice") == []
    assert limiter.failed("10.0.0.7", "alice") == ["from address 10.0.0.7", "for user 'alice'"]
    reason = limiter.refusal("10.0.0.7", "alice")
    assert reason == ("too many failed logins from address 10.0.0.7 (3 allowed in a row, then one per 2 s): "
                      "try again in 2.0 s")
    clock.now += 1.9
    assert limiter.refusal("10.0.0.7", "alice") is not None
    clock.now += 0.1
    assert limiter.refusal("10.0.0.7", "alice") is None
    limiter.failed("10.0.0.7", "alice")
    assert "try again in 2.0 s" in limiter.refusal("10.0.0.7", "alice")


def test_the_user_is_limited_from_every_address_and_the_address_for_every_user():
    clock = Clock()
    limiter = FailureLimiter(burst=2, refill_s=1.0, clock=clock)
    limiter.failed("10.0.0.1", "alice")
    limiter.failed("10.0.0.2", "alice")
    assert "for user 'alice'" in limiter.refusal("10.0.0.3", "alice")
    assert limiter.refusal("10.0.0.3", "bob") is None
    limiter.failed("10.0.0.9", "x")
    limiter.failed("10.0.0.9", "y")
    assert "from address 10.0.0.9" in limiter.refusal("10.0.0.9", "bob")
    assert "from address 10.0.0.9" in limiter.refusal("10.0.0.9", None)  # before a user is named


def test_a_user_used_up_elsewhere_is_not_refused_from_the_clusters_own_hosts():
    clock = Clock()
    limiter = FailureLimiter(burst=2, refill_s=1.0, clock=clock)
    for guesser in ("10.0.0.7", "10.0.0.8", "10.0.0.9"):  # a guesser elsewhere names the servers' user
        limiter.failed(guesser, "broker")
    asked = []

    def own_host(address):
        return lambda: asked.append(address) or address == "10.0.0.1"

    assert limiter.refusal("10.0.0.1", "broker", own_host("10.0.0.1")) is None  # a server's bridge
    assert "for user 'broker'" in limiter.refusal("10.0.0.6", "broker", own_host("10.0.0.6"))
    assert asked == ["10.0.0.1", "10.0.0.6"]
    assert limiter.refusal("10.0.0.1", "alice", own_host("10.0.0.1")) is None
    assert asked == ["10.0.0.1", "10.0.0.6"]  # asked only when the user's allowance is used up
    # Its own failures count as anyone's: a guesser on a server's host has that address's allowance.
    limiter.failed("10.0.0.1", "broker")
    limiter.failed("10.0.0.1", "broker")
    assert "from address 10.0.0.1" in limiter.refusal("10.0.0.1", "broker", own_host("10.0.0.1"))


def test_a_full_allowance_comes_back_and_no_more():
    clock = Clock()
    limiter = FailureLimiter(burst=2, refill_s=1.0, clock=clock)
    limiter.failed("a", "u")
    limiter.failed("a", "u")
    clock.now += 3600  # an hour later: the burst again, not 3600 failures
    limiter.failed("a", "u")
    assert limiter.refusal("a", "u") is None
    limiter.failed("a", "u")
    assert limiter.refusal("a", "u") is not None


def test_failures_of_logins_admitted_at_once_lock_a_user_out_for_a_bounded_while():
    clock = Clock()
    limiter = FailureLimiter(burst=10, refill_s=1.0, clock=clock)
    for _ in range(1000):  # admitted together, failed together
        limiter.failed("10.0.0.7", "alice")
    assert "try again in 11.0 s" in limiter.refusal("10.0.0.8", "alice")
    clock.now += 11
    assert limiter.refusal("10.0.0.8", "alice") is None


def test_made_up_names_cost_bounded_memory(monkeypatch):
    monkeypatch.setattr(logins, "MAX_TRACKED", 10)
    limiter = FailureLimiter(burst=1, refill_s=1.0, clock=Clock())
    for n in range(100):
        limiter.failed(f"10.0.{n}.1", f"user-{n}")
    assert limiter.tracked() == 10
    assert limiter.refusal("10.0.99.1", "user-99") is not None  # the newest are kept


CREDENTIAL = scram.derive(scram.SCRAM_SHA_256, "pw", salt=b"s" * 32)


def test_the_key_changes_with_the_user_the_password_and_every_part_of_the_credential():
    secret = b"k" * 32
    key = check_key(secret, "alice", CREDENTIAL, "pw")
    assert key == check_key(secret, "alice", CREDENTIAL, "pw")
    changed = [
        check_key(secret, "bob", CREDENTIAL, "pw"),
        check_key(secret, "alice", CREDENTIAL, "pw2"),
        check_key(b"j" * 32, "alice", CREDENTIAL, "pw"),
        check_key(secret, "alice", scram.derive(scram.SCRAM_SHA_256, "pw"), "pw"),  # a new salt: set again
        check_key(secret, "alice", dataclasses.replace(CREDENTIAL, iterations=8192), "pw"),
        check_key(secret, "alice", dataclasses.replace(CREDENTIAL, stored_key=bytes(32)), "pw"),
        check_key(secret, "alice", dataclasses.replace(CREDENTIAL, mechanism=scram.SCRAM_SHA_512), "pw"),
        check_key(secret, "alicep", CREDENTIAL, "w"),  # the parts' bounds are part of the key
    ]
    assert key not in changed and len(set(changed)) == len(changed)
    assert b"pw" not in key


def test_a_remembered_check_lasts_its_ttl_from_when_it_was_made():
    clock = Clock()
    cache = CheckCache(size=10, ttl_s=30.0, clock=clock)
    assert not cache.hit(b"k")
    cache.add(b"k")
    clock.now += 29.9
    assert cache.hit(b"k")
    clock.now += 0.1
    assert not cache.hit(b"k") and len(cache) == 0


def test_the_least_recently_used_check_goes_first():
    cache = CheckCache(size=2, ttl_s=30.0, clock=Clock())
    cache.add(b"a")
    cache.add(b"b")
    assert cache.hit(b"a")
    cache.add(b"c")
    assert cache.hit(b"a") and cache.hit(b"c") and not cache.hit(b"b")


def test_a_ttl_of_zero_remembers_nothing():
    cache = CheckCache(size=2, ttl_s=0.0, clock=Clock())
    cache.add(b"a")
    assert not cache.hit(b"a") and len(cache) == 0


def test_a_long_made_up_user_name_is_kept_at_the_longest_a_user_name_can_be():
    clock = Clock()
    limiter = FailureLimiter(burst=2, refill_s=1.0, clock=clock)
    huge = "x" * 500_000  # what fits in an unauthenticated login frame
    limiter.failed("10.0.0.7", huge)
    assert all(len(name) <= logins.MAX_NAME for _, name in limiter._buckets)
    # still limited as one user, and apart from the valid name it starts with
    limiter.failed("10.0.0.8", huge + "y")
    assert "for user" in limiter.refusal("10.0.0.9", huge)
    assert limiter.refusal("10.0.0.9", "x" * 255) is None
