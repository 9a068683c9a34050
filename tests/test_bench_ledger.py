"""The per-step benchmark's long run times every step of one run, limits judged at each."""

from bench import ledger


def test_the_long_run_times_each_of_its_steps_with_the_limits_set() -> None:
    times = ledger.step_times(None)
    assert len(times) == ledger.LONG_RUN  # between 201 model calls: 200 steps
    assert all(t > 0 for t in times)
    assert ledger.LIMITS.max_tokens is not None and ledger.LIMITS.max_cost_usd is not None
