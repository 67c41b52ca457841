from minions.loops import repeating


def test_a_loop_at_the_end_is_found_with_its_period():
    assert repeating(list(range(10)) + [7, 8, 9] * 10) == 3
    assert repeating(["the", "year", "2024", "was"] * 8) == 4
    assert repeating([1] * 30) == 1


def test_text_that_does_not_loop_is_left_alone():
    assert repeating(list(range(100))) == 0
    assert repeating([1, 2, 3] * 5) == 0  # 15 items: too short to call a loop
    assert repeating([1, 2] * 20 + [3]) == 0  # it broke out of the loop
