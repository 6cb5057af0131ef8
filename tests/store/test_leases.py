"""Leases on SQLite and PostgreSQL: renew, lapse, claim (compare-and-set), end by the holder only.

Lease times are real: the test leases last fractions of a second and the tests wait them out (no
clock is patched), so what is asserted is what two gateways on one database would see.
"""

from __future__ import annotations

import time
from datetime import timedelta

from store.leases import LeaseOwner
from store.models import EpisodeRow, EpisodeStatus, utcnow
from store.repository import Store
from store.training import TRAINABLE_STATUSES

A = LeaseOwner("gw-a", "holder-a", "http://a:1")
A_RESTARTED = LeaseOwner("gw-a", "holder-a2", "http://a:1")
B = LeaseOwner("gw-b", "holder-b", "http://b:2")


def _episode(store: Store, episode_id: str, owner: LeaseOwner | None, ttl_s: float = 30.0) -> None:
    store.upsert_task("s/t", "s", "do it", "img", {})
    now = utcnow()
    store.create_episode(
        EpisodeRow(
            id=episode_id,
            task_id="s/t",
            policy_version="v1",
            status=EpisodeStatus.RUNNING.value,
            agent_token_hash=episode_id.ljust(64, "0"),
            sandbox_id=f"sb-{episode_id}",
            sandbox_engine="engine-1",
            num_calls=0,
            created_at=now,
            last_activity_at=now,
            details={},
            owner_instance=owner.instance if owner else None,
            owner_url=owner.url if owner else None,
            lease_holder=owner.holder if owner else None,
            lease_expires_at=now + timedelta(seconds=ttl_s) if owner else None,
        )
    )


def test_renew_answers_only_what_the_holder_still_holds(store: Store) -> None:
    _episode(store, "e1", A)
    _episode(store, "e2", A)
    _episode(store, "e3", B)
    store.end_episode("e2", EpisodeStatus.FINISHED, reward=1.0, holder=A.holder)
    before = store.episode("e1").lease_expires_at
    assert store.renew_leases(A.holder, ["e1", "e2", "e3"], ttl_s=60) == {"e1"}
    assert store.episode("e1").lease_expires_at > before
    assert store.renew_leases(A.holder, [], ttl_s=60) == set()


def test_a_live_lease_is_never_lapsed_and_the_own_instance_claims_first(store: Store) -> None:
    _episode(store, "mine", A, ttl_s=0.3)  # A's previous process, same instance
    _episode(store, "theirs", B, ttl_s=0.3)
    _episode(store, "live", B, ttl_s=60)
    _episode(store, "legacy", None)  # from before leases: expired long ago
    assert {e.id for e in store.lapsed_episodes("gw-a", takeover_after_s=30)} == {"legacy"}
    time.sleep(0.5)
    lapsed = {e.id: e for e in store.lapsed_episodes("gw-a", takeover_after_s=30)}
    assert set(lapsed) == {"mine", "legacy"}  # B's lapsed lease is B's own to reclaim for 30 s
    assert lapsed["mine"].sandbox_engine == "engine-1" and lapsed["mine"].owner_url == "http://a:1"
    # another gateway takes it only once it has been lapsed the takeover time
    assert {e.id for e in store.lapsed_episodes("gw-c", takeover_after_s=0.1)} == {"mine", "theirs", "legacy"}


def test_claim_is_compare_and_set(store: Store) -> None:
    _episode(store, "e1", A, ttl_s=0.2)
    time.sleep(0.4)
    [lapsed] = store.lapsed_episodes("gw-a", takeover_after_s=30)
    assert store.claim_episode(lapsed, A_RESTARTED, ttl_s=30, takeover_after_s=30)
    assert not store.claim_episode(lapsed, A_RESTARTED, ttl_s=30, takeover_after_s=30)  # holder changed
    row = store.episode("e1")
    assert (row.lease_holder, row.owner_instance) == ("holder-a2", "gw-a")
    # the old holder can neither renew nor end what it lost
    assert store.renew_leases(A.holder, ["e1"], ttl_s=30) == set()
    assert not store.end_episode("e1", EpisodeStatus.FINISHED, reward=1.0, holder=A.holder)
    assert store.end_episode(
        "e1", EpisodeStatus.INFRA_ERROR, details={"infra_error": "x"}, holder="holder-a2"
    )
    assert store.episode("e1").status == "infra_error"


def test_a_renewed_lease_cannot_be_claimed(store: Store) -> None:
    _episode(store, "e1", A, ttl_s=0.2)
    time.sleep(0.4)
    [lapsed] = store.lapsed_episodes("gw-a", takeover_after_s=30)
    assert store.renew_leases(A.holder, ["e1"], ttl_s=30) == {"e1"}  # the holder was only slow
    assert not store.claim_episode(lapsed, A_RESTARTED, ttl_s=30, takeover_after_s=30)
    assert not store.claim_episode(lapsed, B, ttl_s=30, takeover_after_s=0)


def test_another_instance_waits_out_the_takeover_time(store: Store) -> None:
    _episode(store, "e1", A, ttl_s=0.1)
    time.sleep(0.3)
    lapsed = store.lapsed_episodes("gw-b", takeover_after_s=0.1)
    assert [e.id for e in lapsed] == ["e1"]
    assert not store.claim_episode(lapsed[0], B, ttl_s=30, takeover_after_s=60)  # not lapsed that long
    assert store.claim_episode(lapsed[0], B, ttl_s=30, takeover_after_s=0.1)


def test_running_sandboxes_names_only_running_episodes(store: Store) -> None:
    _episode(store, "e1", A)
    _episode(store, "e2", A)
    store.end_episode("e2", EpisodeStatus.FINISHED, reward=0.0)
    assert store.running_sandboxes(["sb-e1", "sb-e2", "sb-x"]) == {"sb-e1"}


def test_infra_errors_are_never_trained() -> None:
    assert EpisodeStatus.INFRA_ERROR.value not in TRAINABLE_STATUSES
