"""Numbers past what a command can use are refused with one error line naming the flag and why, never a traceback,
a hang or an empty answer: a log position past PostgreSQL's bigint, a number of thousands of digits, more processes
or events than a run can hold, an empty or reversed list; a trace file that is not an openb list says so."""

from __future__ import annotations

from pathlib import Path

import pytest

from allot_cli.main import parser_for
from allot_contracts.errors import InvalidInput
from allot_intake.errors import UsageError

HUGE = "9" * 5000


def test_the_largest_values_are_taken() -> None:
    argv = ["events", "tail", "--from-position", str(2**63 - 1), "--last", "000000000000000000000000007"]
    args = parser_for(argv).parse_args(argv)
    assert (args.from_position, args.last) == (2**63 - 1, 7)
    argv = ["bench", "replay", "--events", "300000,10000000"]
    assert parser_for(argv).parse_args(argv).events == [300_000, 10_000_000]
    argv = ["sim", "trace", "--seeds", "42-44", "--tune", "100"]
    assert parser_for(argv).parse_args(argv).seeds == [42, 43, 44]


def test_an_empty_policy_list_and_a_file_that_is_not_an_openb_list_are_refused(tmp_path: Path) -> None:
    from allot_placement.openb import read_nodes, read_pods
    from allot_sim.trace import policies

    for text in ("", "fgd,,bestfit"):
        with pytest.raises(UsageError, match="a policy name is empty"):
            policies(text)
    other = tmp_path / "other.csv"
    other.write_text("user,uid\nroot,0\n")
    with pytest.raises(InvalidInput, match="other.csv line 2: no 'sn' column: not an openb trace list"):
        read_nodes(other)
    pods = tmp_path / "pods.csv"
    pods.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,lots,1,0,0\n")
    with pytest.raises(InvalidInput, match="pods.csv line 2: a field is missing or not a whole number"):
        read_pods(pods)


def test_a_long_label_selector_is_named_not_repeated_whole() -> None:
    from allot_views.kinds import parse_selector

    with pytest.raises(UsageError) as refused:
        parse_selector("a" * 100_000)
    assert len(str(refused.value)) < 400 and "(100000 characters)" in str(refused.value)
