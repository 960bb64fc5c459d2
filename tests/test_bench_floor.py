"""The daemon benchmark's floor ratio: our tasks/min over the no-op floor's, same runs."""

from __future__ import annotations

import pytest

from bench.daemon_kinds import Drain, floor_ratio, median_ratio


def test_the_ratio_is_our_rate_over_the_floors_for_the_same_runs() -> None:
    # 40 runs: ours drained in 80 s, the floor in 60 s, so ours is 0.75x the floor's rate.
    assert floor_ratio(Drain(40, 80.0), Drain(40, 60.0)) == pytest.approx(0.75)
    assert floor_ratio(Drain(40, 45.0), Drain(40, 60.0)) == pytest.approx(60 / 45)


def test_a_floor_of_another_run_count_is_no_baseline() -> None:
    with pytest.raises(ValueError, match="the floor drained 39 runs where ours took 40"):
        floor_ratio(Drain(40, 80.0), Drain(39, 60.0))


@pytest.mark.parametrize(
    ("ours", "floor", "message"),
    [
        (Drain(40, None), Drain(40, 60.0), "ours: no drain time"),
        (Drain(40, 80.0), Drain(40, 0.0), "the floor: no drain time"),
        (Drain(0, 80.0), Drain(0, 60.0), "no runs"),
        # A backlog cut by its deadline drained faster than it would have: no ratio.
        (Drain(40, 80.0, complete=False), Drain(40, 60.0), "before its deadline"),
    ],
)
def test_a_side_without_a_full_drain_gives_no_ratio(
    ours: Drain, floor: Drain, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        floor_ratio(ours, floor)


def test_rounds_are_judged_by_the_median_of_their_ratios() -> None:
    # One slow round (0.5x) neither sinks nor lifts the figure: the middle round decides.
    rounds = [
        (Drain(16, 60.0), Drain(16, 66.0)),  # 1.1x
        (Drain(16, 120.0), Drain(16, 60.0)),  # 0.5x
        (Drain(16, 50.0), Drain(16, 45.0)),  # 0.9x
    ]
    median, each = median_ratio(rounds)
    assert median == pytest.approx(0.9)
    assert each == pytest.approx([1.1, 0.5, 0.9])


def test_a_round_without_a_ratio_is_said_and_left_out_of_the_median() -> None:
    rounds = [
        (Drain(16, 60.0), Drain(16, 66.0)),
        (Drain(16, 60.0, complete=False), Drain(16, 30.0)),
        (Drain(16, 50.0), Drain(16, 45.0)),
    ]
    median, each = median_ratio(rounds)
    assert median == pytest.approx(1.0)
    assert isinstance(each[1], str) and "before its deadline" in each[1]


def test_a_median_of_the_few_rounds_that_drained_is_no_figure() -> None:
    rounds = [
        (Drain(16, 60.0), Drain(16, 66.0)),
        (Drain(16, 60.0, complete=False), Drain(16, 30.0)),
        (Drain(16, None), Drain(16, 45.0)),
    ]
    with pytest.raises(ValueError, match="1 of 3 rounds gave a ratio"):
        median_ratio(rounds)
