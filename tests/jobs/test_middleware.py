import pytest

from sidequest.jobs.middleware import Chain


def recorder(name, log):
    class Link:
        def __init__(self, *args, **kwargs):
            self.args = args

        def __call__(self, *a, call_next=None):
            *_, nxt = a
            log.append(f"{name}>")
            result = nxt()
            log.append(f"<{name}")
            return result
    Link.__name__ = name
    return Link


def test_links_wrap_in_order_and_return_the_inner_result():
    log = []
    a, b, c = (recorder(n, log) for n in "abc")
    chain = Chain()
    chain.add(a)
    chain.add(c)
    chain.insert_before(c, b)
    assert chain.invoke("x", final=lambda: log.append("job") or 42) == 42
    assert log == ["a>", "b>", "c>", "job", "<c", "<b", "<a"]


def test_prepend_insert_after_remove_and_readd_moves():
    log = []
    a, b, c = (recorder(n, log) for n in "abc")
    chain = Chain()
    chain.add(a)
    chain.prepend(b)
    chain.insert_after(b, c)
    assert list(chain) == [b, c, a]
    chain.remove(c)
    chain.add(b)  # adding again moves it to the end
    assert list(chain) == [a, b]
    assert c not in chain and a in chain


def test_insert_relative_to_missing_link_is_an_error():
    chain = Chain()
    with pytest.raises(ValueError, match="not in this middleware chain"):
        chain.insert_after(object, object)


def test_class_links_are_fresh_per_invoke_with_their_arguments():
    seen = []

    class Counter:
        def __init__(self, start):
            self.count = start

        def __call__(self, payload, call_next):
            self.count += 1
            seen.append(self.count)
            return call_next()

    chain = Chain()
    chain.add(Counter, 10)
    chain.invoke({}, final=lambda: None)
    chain.invoke({}, final=lambda: None)
    assert seen == [11, 11]


def test_a_link_that_does_not_call_next_stops_the_chain():
    ran = []
    chain = Chain()
    chain.add(lambda payload, call_next: None)
    assert chain.invoke({}, final=lambda: ran.append(1)) is None
    assert ran == []
