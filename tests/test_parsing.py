"""domainpar.parsing: YAML and JSON bounded in size and nesting, and YAML mappings that name each key once."""

from __future__ import annotations

import pytest

from domainpar.errors import DomainparError
from domainpar.parsing import parse_yaml


@pytest.mark.parametrize(
    "text, key, first, again",
    [
        ("model:\n  hidden: 8\nmodel:\n  lr: 1\n", "'model'", 1, 3),  # a section written twice
        ("a:\n  b:\n    c: 1\n    c: 2\n", "'c'", 3, 4),  # deep inside
        ("a: {x: 1, x: 2}\n", "'x'", 1, 1),  # a flow mapping
        ("- {k: 1}\n- {k: 2, k: 3}\n", "'k'", 2, 2),  # in a list
    ],
)
def test_a_key_named_twice_in_one_mapping_is_refused_with_its_lines(text, key, first, again):
    with pytest.raises(DomainparError, match=rf"f.yaml: expected a file that names each key of a mapping once \(found {key} "
                                             rf"on line {first} and again on line {again}: the first would be lost\)"):  # fmt: skip
        parse_yaml(text, "f.yaml", "a file")


def test_equal_keys_in_different_mappings_and_merges_are_yaml_as_written():
    text = "base: &base\n  hidden: 8\n  lr: 1\nmodel:\n  <<: *base\n  hidden: 16\nother:\n  hidden: 8\n"
    assert parse_yaml(text, "f.yaml", "a file") == {
        "base": {"hidden": 8, "lr": 1}, "model": {"hidden": 16, "lr": 1}, "other": {"hidden": 8},
    }  # fmt: skip
    assert parse_yaml("1: a\n'1': b\n", "f.yaml", "a file") == {1: "a", "1": "b"}  # an int and a string
