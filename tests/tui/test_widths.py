"""`give_way`: the widths of the columns that give way on a narrow terminal."""

from __future__ import annotations

import unicodedata

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


def test_text_is_cut_by_the_cells_it_takes_not_by_its_characters() -> None:
    """A CJK or emoji name under the limit in characters but twice as wide was left
    whole, pushing the columns after it off screen; a cut could leave an accent
    without its letter."""
    from rich.cells import cell_len

    from wq.tui.format import short, short_middle

    wide = "日本語/プロジェクト"  # 11 characters, 20 cells
    for width in (7, 10, 13):
        assert cell_len(short_middle(wide, width)) <= width
        assert cell_len(short(wide, width)) <= width
    assert short_middle(wide, 10) == "日…ェクト"  # both ends kept
    assert short("🚀🚀🚀🚀", 5) == "🚀🚀…"
    assert short_middle("many/long-lane", 20) == "many/long-lane"  # fits: left whole
    accented = "e\u0301quipe/e\u0301te\u0301-api"  # accents after their letters
    cut = short_middle(accented, 9)
    assert cell_len(cut) <= 9
    assert not any(unicodedata.combining(part[0]) for part in cut.split("…") if part), cut
