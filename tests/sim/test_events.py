import pytest

from tailrl.sim.events import EventLoop


def test_time_order_ties_fifo_and_nested_scheduling():
    loop, seen = EventLoop(), []
    loop.at(2.0, lambda: seen.append(("b", loop.now)))
    loop.at(1.0, lambda: (seen.append(("a", loop.now)), loop.after(0.5, lambda: seen.append(("a+", loop.now)))))
    loop.at(2.0, lambda: seen.append(("c", loop.now)))
    assert loop.run() == 2.0
    assert seen == [("a", 1.0), ("a+", 1.5), ("b", 2.0), ("c", 2.0)]
    assert loop.processed == 4 and loop.pending() == 0


def test_run_until_stops_and_resumes():
    loop, seen = EventLoop(), []
    for t in (1, 2, 3):
        loop.at(t, lambda t=t: seen.append(t))
    loop.run(until=2.0)
    assert seen == [1, 2] and loop.pending() == 1
    loop.run()
    assert seen == [1, 2, 3]


def test_past_is_refused():
    loop = EventLoop()
    loop.at(5.0, lambda: None)
    loop.run()
    with pytest.raises(ValueError):
        loop.at(1.0, lambda: None)
