"""The skip rule: absent data or reference packages skip locally with the reason and fail under CI (any true CI)."""

import pytest

from tests import conftest

ABSENT = "no_such_reference_package_xyz"


@pytest.mark.parametrize("value", ["true", "True", "TRUE", "1", "yes", "Yes", "on", " true "])
def test_true_spellings_of_ci_fail_naming_the_package(value, monkeypatch):
  monkeypatch.setenv("CI", value)
  assert conftest.in_ci()
  with pytest.raises(pytest.fail.Exception, match=f"CI must have the reference package '{ABSENT}'"):
    conftest.require_package(ABSENT)


@pytest.mark.parametrize("value", [None, "", "0", "false", "no", "off"])
def test_outside_ci_an_absent_package_skips_with_its_name(value, monkeypatch):
  if value is None:
    monkeypatch.delenv("CI", raising=False)
  else:
    monkeypatch.setenv("CI", value)
  assert not conftest.in_ci()
  with pytest.raises(pytest.skip.Exception, match=f"the reference package '{ABSENT}' is absent"):
    conftest.require_package(ABSENT)


def test_present_package_is_returned_and_absent_data_follows_the_same_rule(monkeypatch):
  assert conftest.require_package("numpy.linalg").__name__ == "numpy.linalg"
  monkeypatch.setenv("CI", "1")
  with pytest.raises(pytest.fail.Exception, match="CI must have the shared data"):
    conftest.require_data("no/such/file.txt")
  monkeypatch.setenv("CI", "0")
  with pytest.raises(pytest.skip.Exception, match="the shared data is absent"):
    conftest.require_data("no/such/file.txt")
