"""The documented examples run, print what docs/policy.md shows, and show the code it shows."""

from __future__ import annotations

import re
import runpy
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "policy_queue.py"
DOC = ROOT / "docs" / "policy.md"
REFRESH = "run `python examples/policy_queue.py` and paste its code and output into docs/policy.md"


def run_example(capsys: pytest.CaptureFixture[str]) -> str:
    namespace = runpy.run_path(str(EXAMPLE), run_name="policy_queue")
    namespace["main"]()
    return capsys.readouterr().out


def fenced_blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```$", text, flags=re.DOTALL | re.MULTILINE)


def section(output: str, title: str) -> list[str]:
    """The lines of one titled part of the example's output, up to the next blank line."""
    lines = output.splitlines()
    start = lines.index(title) + 1
    end = lines.index("", start) if "" in lines[start:] else len(lines)
    return lines[start:end]


def test_policy_example_orders_the_queue_by_fair_tree(capsys: pytest.CaptureFixture[str]) -> None:
    output = run_example(capsys)
    before = section(
        output, "queue before the cycle (accounts below their budget first, then by Fair Tree):"
    )
    # Below their budgets: eval (Level FS 4 under research), team-b (inf under pretraining),
    # then product (0.967 at the top, below research's 1.01); team-a runs 144 GPUs against a
    # budget of 60.5, so it follows them; the unallocated notebook last.
    jobs = [line.split()[1] for line in before if line.startswith("  #")]
    assert jobs == ["eval-nightly", "b-finetune", "p-train", "a-ablation", "a-eval", "a-notebook"]
    assert "  #3 p-train       allocated, below its budget, priority 0" in before
    assert "  #4 a-ablation    allocated, priority 5" in before
    assert "  #6 a-notebook    unallocated, priority 0" in before
    standings = [line.strip() for line in before if not line.startswith("  #")]
    assert standings[0] == "research FS=1.01 (S=0.700 U=0.690) > eval FS=4 (S=0.400 U=0.100)"
    assert standings[1].endswith("> team-b FS=inf (S=0.500 U=0.000)")
    assert standings[2] == "product FS=0.967 (S=0.300 U=0.310)"
    assert standings[3].endswith("> team-a FS=0.5 (S=0.500 U=1.000)")


def test_policy_example_binds_reserves_and_backfills(capsys: pytest.CaptureFixture[str]) -> None:
    output = run_example(capsys)
    assert section(output, "cycle at +2 h:") == [
        "  bind    eval-nightly   4 pod(s) (allocated)",
        "  bind    a-ablation     8 pod(s) (allocated, backfilled)",
        "  bind    a-eval         2 pod(s) (allocated, backfilled)",
        "  bind    a-notebook     1 pod(s) (unallocated, backfilled)",
        "  reserve b-finetune    at +1 h in rack z0-b0-r0",
    ]
    after = section(output, "queue after the cycle:")
    assert [line for line in after if line.startswith("  #")] == [
        "  #1 b-finetune    [research/pretraining/team-b]",
        "  #2 p-train       [product]",
    ]
    reasons = [line.strip() for line in after if line.strip().startswith("reason:")]
    assert reasons[0].startswith("reason:   waiting for reservation at +60 min in rack z0-b0-r0")
    assert "needs 36 pods of 4 GPUs (144 GPUs)" in reasons[1]
    assert "sort key: product FS=0.967 (S=0.300 U=0.310); priority 0" in output
    explained = section(output, "explain b-finetune:")
    assert explained[0].startswith("  #1 b-finetune [research/pretraining/team-b] research FS=1.01")


def test_docs_show_the_example_and_its_real_output(capsys: pytest.CaptureFixture[str]) -> None:
    output = run_example(capsys)
    doc = DOC.read_text(encoding="utf-8")
    assert EXAMPLE.read_text(encoding="utf-8") in fenced_blocks(doc, "python"), REFRESH
    assert output in fenced_blocks(doc, "text"), REFRESH
