"""docs/config.md is what `python -m configs.reference` writes, and every config field has a comment to write."""

from configs import reference


def test_the_page_is_up_to_date():
  written = (reference.REPO / "docs" / "config.md").read_text(encoding="utf-8")
  assert written == reference.page(), "docs/config.md is out of date: python -m configs.reference > docs/config.md"


def test_every_field_has_a_comment():
  assert reference.missing_comments() == []


def test_lamb_is_documented_by_the_optimizer_field():
  assert '"lamb"' in reference.field_comments("configs/common.py")["optimizer.name"]


def test_a_comment_is_trailing_or_the_lines_just_above():
  source = ("config.a = 1  # Trailing.\n"
            "# Above, first line;\n# second line.\n"
            "config.b = 2\n"
            "\n"
            "opt.c = 3\n"
            "config.b = 4  # A later comment of a commented field is not read.\n")
  assert reference.comments_in(source) == {"a": "Trailing.", "b": "Above, first line; second line.",
                                           "optimizer.c": ""}
