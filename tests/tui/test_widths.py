"""`give_way`: the widths of the columns that give way on a narrow terminal."""

from __future__ import annotations

from wq.tui.widths import COMFORTABLE, PADDING, give_way

FIXED = [8, 4, 9]  # content widths of the columns never cut
OTHERS = sum(width + PADDING for width in FIXED)


def test_what_is_left_is_shared_evenly_up_to_each_ones_most() -> None:
    room = OTHERS + 2 * PADDING + 30
    assert give_way(room, FIXED, [(7, 50), (10, 40)]) == [14, 16]
    assert give_way(room, FIXED, [(7, 9), (10, 40)]) == [9, 21]  # a short one leaves room
    assert give_way(room + 200, FIXED, [(7, 50), (10, 40)]) == [50, 40]


def test_when_nothing_fits_the_text_columns_stay_readable() -> None:
    # The table scrolls sideways anyway: cutting them to their least would gain nothing.
    assert give_way(OTHERS, FIXED, [(7, 50), (10, 12)]) == [COMFORTABLE, 12]
