import pytest

from kubelet.util.duration import format_duration, parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("1m30s", 90.0),
        ("250ms", 0.25),
        ("1h", 3600.0),
        ("1.5h", 5400.0),
        ("0", 0.0),
        ("0s", 0.0),
        ("100us", 1e-4),
        ("2h45m10.5s", 2 * 3600 + 45 * 60 + 10.5),
        ("-1s", -1.0),
        ("1h0m0s", 3600.0),
    ],
)
def test_parse(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "10", "1x", "m", "1m30", "1.2.3s", "s1"])
def test_parse_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (60, "1m0s"),
        (90, "1m30s"),
        (3600, "1h0m0s"),
        (0, "0s"),
        (0.25, "250ms"),
        (0.0005, "500µs"),
        (4 * 3600, "4h0m0s"),
        (5 * 3600 + 1.25, "5h0m1.25s"),
        (-2, "-2s"),
    ],
)
def test_format_like_go(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text
    assert parse_duration(text) == pytest.approx(seconds)
