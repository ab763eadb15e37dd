"""``SPECDEPLOY_TIME_SCALE``: one factor that only ever widens upper bounds."""

from __future__ import annotations

import pytest

from e2e import time_scale


def test_the_factor_defaults_to_one_and_reads_the_variable() -> None:
    assert time_scale.factor({}) == 1.0
    assert time_scale.factor({time_scale.ENV: " "}) == 1.0
    assert time_scale.factor({time_scale.ENV: "2.5"}) == 2.5


@pytest.mark.parametrize("raw", ["0.5", "fast", "-1", "nan"])
def test_a_factor_that_would_narrow_or_is_no_number_is_refused_by_name(raw: str) -> None:
    with pytest.raises(ValueError, match=time_scale.ENV):
        time_scale.factor({time_scale.ENV: raw})


def test_a_bound_scales_by_the_factor(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(time_scale.ENV, "3")
    assert time_scale.scaled(40) == 120
