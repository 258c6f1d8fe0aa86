"""Hypothesis profiles: "ci" (the default in the test command: few examples, derandomised, so a
busy 2-core CI machine runs the same cases every time) and "thorough" (one flag away:
``pytest --hypothesis-profile=thorough``). ``examples(n)`` scales a test's thorough count to the
loaded profile, so heavier properties keep more examples than light ones."""
from __future__ import annotations

from hypothesis import HealthCheck, settings

THOROUGH = 200
settings.register_profile("thorough", max_examples=THOROUGH, deadline=None)
settings.register_profile("ci", max_examples=25, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])


def examples(n: int, **kwargs) -> settings:
    """settings() for a property that deserves ``n`` examples when thorough."""
    scaled = max(5, round(n * settings.default.max_examples / THOROUGH))
    return settings(max_examples=scaled, deadline=None, **kwargs)
