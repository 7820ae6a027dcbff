"""docs/pretraining.md's table of the recipe's plans is pod_plan.docs_table() as the code computes it today (the
workers a host gets, the read factor of a gs:// corpus, the usable memory, the verdicts): a change to any of them
that the page does not follow fails here."""

from pathlib import Path

from launch.experiments import pod_plan

PAGE = Path(__file__).resolve().parents[3] / "docs" / "pretraining.md"


def test_the_plan_table_is_generated_from_pod_plan():
  lines = PAGE.read_text().splitlines()
  start = next(i for i, line in enumerate(lines) if line.startswith("| phase, slice | rows per device |"))
  end = next(i for i in range(start, len(lines)) if not lines[i].startswith("|"))
  assert "\n".join(lines[start:end]) == pod_plan.docs_table(), (
      "regenerate with: python -c 'from launch.experiments import pod_plan; print(pod_plan.docs_table())'")
  assert "ACCELERATOR_RATIO` = 0.60" in PAGE.read_text() and pod_plan.ACCELERATOR_RATIO == 0.60
