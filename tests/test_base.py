import dataclasses

import pytest

from jaxrl.algos import ALGORITHMS, base


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_a_shared_field_has_the_same_kind_in_every_config(name):
    """A field that several Configs share (base.SHARED_FIELDS) is static in all of them or traced in all of them,
    so that a sweep over `learning_rate` or `gamma` compiles once whatever the algorithm, and a shape stays static."""
    for field in dataclasses.fields(ALGORITHMS[name].Config):
        if field.name in base.SHARED_FIELDS:
            kind, _ = base.SHARED_FIELDS[field.name]
            assert base.is_static(field) == (kind is base.static), (name, field.name)


def test_shared_gives_the_shared_help_and_this_configs_default():
    field = base.shared("gamma", 0.9)
    assert field.default == 0.9 and field.metadata["help"] == "discount factor" and not base.is_static(field)
    assert base.is_static(base.shared("num_envs", 4))
    assert "between torso and Q head:" in base.core_field("Q head").metadata["help"]
