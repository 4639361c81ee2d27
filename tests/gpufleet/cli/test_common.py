"""CLI parsing helpers."""

from __future__ import annotations

import pytest

from gpufleet.cli.common import ask, node_index, parse_duration, parse_pairs, parse_ttl
from gpufleet.components.errors import SpecError


@pytest.mark.parametrize(
    ("text", "minutes"),
    [("90", 90), ("4h", 240), ("1h30m", 90), ("2d", 2880), ("0", 0), ("30s", 1)],
)
def test_parse_ttl(text, minutes):
    assert parse_ttl(text) == minutes


@pytest.mark.parametrize("text", ["soon", "4x", "h4", "1h 30m"])
def test_parse_ttl_rejects(text):
    with pytest.raises(SpecError) as e:
        parse_ttl(text)
    assert e.value.field == "ttl"


@pytest.mark.parametrize(
    ("text", "seconds"), [("90s", 90), ("45m", 2700), ("2", 120), ("1h30m", 5400), ("1d", 86400)]
)
def test_parse_duration(text, seconds):
    assert parse_duration(text, "timeout") == seconds


@pytest.mark.parametrize("text", ["soon", "4x", "1h 30m", "367d", "²"])
def test_parse_duration_names_the_field(text):
    with pytest.raises(SpecError) as e:
        parse_duration(text, "timeout")
    assert e.value.field == "timeout"


def test_parse_pairs():
    assert parse_pairs(["a=1", "b=x=y"], "tag") == {"a": "1", "b": "x=y"}
    with pytest.raises(SpecError):
        parse_pairs(["novalue"], "tag")


@pytest.mark.parametrize(("answer", "yes"), [("\n", True), ("y\n", True), ("YES\n", True),
                                            ("n\n", False), ("no\n", False)])  # fmt: skip
def test_ask_takes_enter_as_yes(answer, yes, monkeypatch, capsys):
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO(answer))
    assert ask("Create it?") is yes
    assert capsys.readouterr().err == "Create it? [Y/n] "


@pytest.mark.parametrize(("node", "k"), [("node-0", 0), ("node-12", 12), ("head", 0)])
def test_node_index_orders_nodes_by_their_number(node, k):
    assert node_index(node) == k
