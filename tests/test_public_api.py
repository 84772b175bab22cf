"""The names the README, the docs pages and notebooks use are importable from the package root."""

import agentlab


def test_every_exported_name_resolves():
    for name in agentlab.__all__:
        assert getattr(agentlab, name) is not None, name


def test_policies_round_trip_through_json():
    for cls in (agentlab.SummaryPolicy, agentlab.CompactionPolicy, agentlab.RecallPolicy, agentlab.MemoryPolicy):
        policy = cls()
        data = policy.to_dict()
        assert cls.from_dict(data) == policy, cls.__name__


def test_the_seam_is_in_the_top_level_api():
    from agentlab.core import ContextMechanism, project

    assert agentlab.ContextMechanism is ContextMechanism and agentlab.project is project
    assert {"ContextMechanism", "project"} <= set(agentlab.__all__)
