import math

import pytest

from optsched.predict.history import HIST_KEYS, RuntimeHistory


def test_empty_history_gives_missing_values():
    h = RuntimeHistory()
    f = h.features_for("t", "u", 100.0)
    assert tuple(f) == HIST_KEYS
    assert f["hist_user_n"] == 0.0 and f["hist_tenant_n"] == 0.0
    assert math.isnan(f["hist_user_median_s"])


def test_only_jobs_ended_before_now_count():
    h = RuntimeHistory()
    h.observe("t", "u", end_s=50.0, runtime_s=10.0)
    h.observe("t", "u", end_s=200.0, runtime_s=1000.0)  # ends after the query: must not count
    h.observe("t", "v", end_s=60.0, runtime_s=30.0)
    f = h.features_for("t", "u", now=100.0)
    assert f["hist_user_n"] == 1.0
    assert f["hist_user_median_s"] == 10.0
    assert f["hist_tenant_n"] == 2.0
    assert f["hist_tenant_mean_s"] == 20.0
    # a job ending exactly at now is not "before" now
    assert h.features_for("t", "u", now=50.0)["hist_user_n"] == 0.0
    assert h.features_for("t", "u", now=201.0)["hist_user_n"] == 2.0


def test_observe_order_does_not_matter():
    a, b = RuntimeHistory(window=2), RuntimeHistory(window=2)
    jobs = [(10.0, 1.0), (20.0, 2.0), (30.0, 3.0), (40.0, 4.0)]
    for end, rt in jobs:
        a.observe("t", "u", end, rt)
    for end, rt in reversed(jobs):
        b.observe("t", "u", end, rt)
    fa, fb = a.features_for("t", "u", 35.0), b.features_for("t", "u", 35.0)
    assert fa == fb
    assert fa["hist_user_n"] == 2.0 and fa["hist_user_last_s"] == 3.0
    assert fa["hist_user_median_s"] == 2.5


def test_users_are_scoped_by_tenant_and_empty_user_is_unknown():
    h = RuntimeHistory()
    h.observe("a", "u", 1.0, 5.0)
    h.observe("b", "", 1.0, 7.0)
    assert h.features_for("b", "u", 10.0)["hist_user_n"] == 0.0
    assert h.features_for("b", "", 10.0)["hist_user_n"] == 0.0
    assert h.features_for("b", "", 10.0)["hist_tenant_n"] == 1.0


def test_rejects_bad_values():
    h = RuntimeHistory()
    with pytest.raises(ValueError, match="runtime_s"):
        h.observe("t", "u", 1.0, -1.0)
    with pytest.raises(ValueError, match="finite"):
        h.observe("t", "u", math.nan, 1.0)
