"""The test command's scheduling (tests/conftest.py, scripts/test.sh): a test that uses a module-scoped fixture of
its module carries that module's xdist group, so that `--dist loadgroup` runs the module's sharing tests in one
worker, which computes the fixture once; under that scheduler the worker files the test under the group."""

import pytest


@pytest.fixture(scope="module")
def shared():
    return object()


def test_a_test_sharing_a_module_fixture_is_in_the_modules_group(shared, request):
    assert [mark.args for mark in request.node.iter_markers("xdist_group")] == [("test_suite_groups",)]
    if getattr(request.config.option, "loadgroup", False):  # a pytest-xdist worker under --dist loadgroup
        assert request.node.nodeid.endswith("@test_suite_groups"), request.node.nodeid


def test_a_test_without_shared_fixtures_is_in_no_group(tmp_path, request):
    assert request.node.get_closest_marker("xdist_group") is None
    assert "@" not in request.node.nodeid
