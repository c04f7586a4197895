"""What the command line reads before argparse does: a signed value of ``report usage --since/--until`` (joined to its
option, so that the command refuses it saying why), and whether ``get`` was given a KIND (refused asking for it with
the kinds there are). Neither depends on argparse's internals or on the words of its messages, which gettext may
translate."""

from __future__ import annotations

import argparse

import pytest

from allot_cli.commands.get import names_kind
from allot_cli.main import main, signed_values
from allot_views.kinds import KINDS


@pytest.mark.parametrize(
    ("argv", "read"),
    [
        (["report", "usage", "--since", "-5m"], ["report", "usage", "--since=-5m"]),
        (
            ["report", "usage", "--until", "-1h", "--by", "quota"],
            ["report", "usage", "--until=-1h", "--by", "quota"],
        ),
        (["report", "usage", "--since", "-.5h"], ["report", "usage", "--since=-.5h"]),
        (["report", "usage", "--since", "--by", "quota"], ["report", "usage", "--since", "--by", "quota"]),
        (["report", "usage", "--since", "-o", "json"], ["report", "usage", "--since", "-o", "json"]),
        (["report", "usage", "--since", "-"], ["report", "usage", "--since", "-"]),
        (["report", "usage", "--since"], ["report", "usage", "--since"]),
        (["report", "usage", "--", "--since", "-5m"], ["report", "usage", "--", "--since", "-5m"]),
        (["replay", "--verify", "--since", "-5"], ["replay", "--verify", "--since", "-5"]),  # not report's
    ],
)
def test_a_signed_value_is_joined_to_the_report_option_it_follows(argv: list[str], read: list[str]) -> None:
    assert signed_values(argv) == read


OPTIONS = {
    "-h": False,
    "--help": False,
    "-n": True,
    "--namespace": True,
    "-A": False,
    "-o": True,
    "--output": True,
}


@pytest.mark.parametrize(
    ("args", "given"),
    [
        (["pods"], True),
        (["-n", "ns", "pods"], True),
        (["-n", "ns"], False),
        (["-nns"], False),
        (["-nns", "pods"], True),
        (["--namespace=ns"], False),
        (["--name", "ns"], False),  # an abbreviation takes its value too
        (["-An", "ns"], False),
        (["-An", "ns", "pods"], True),
        (["-A", "-o", "json"], False),
        (["--", "pods"], True),
        (["--"], False),
        ([], False),
        (["-h"], True),
        (["-Ah"], True),
        (["--he"], True),
    ],
)
def test_get_tells_whether_a_kind_is_given(args: list[str], given: bool) -> None:
    assert names_kind(args, OPTIONS) is given


def test_no_kind_is_refused_with_the_kinds_whatever_the_language_of_argparses_messages(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """argparse's messages go through gettext: under a translation, the refusal still lists the kinds."""
    monkeypatch.setattr(
        argparse, "_", lambda text: text.replace("arguments are required", "Argumente fehlen")
    )
    with pytest.raises(SystemExit) as exited:
        main(["get", "-n", "default"])
    assert exited.value.code == 2
    kinds = ", ".join(kind.plural for kind in KINDS)
    assert capsys.readouterr().err.splitlines()[-1].endswith(f"KIND (one of: {kinds})")
