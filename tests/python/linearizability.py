"""A linearizability checker for a single register, in the manner of Wing & Gong with Lowe's
memoisation (the algorithm of Porcupine and Knossos): a depth-first search for an order of the
operations that respects real time (an operation that returned before another was called comes
first) and the register's sequential behaviour, with a cache of (operations linearized, value)
pairs already explored.

An operation whose outcome is unknown (the client saw an error) returns at infinity and accepts
any output: it may have happened at any point after its call, or not at all (placed last)."""

import math
from dataclasses import dataclass, field
from typing import Any, Optional


@dataclass
class Operation:
    kind: str  # "read", "write" or "cas"
    argument: Any  # write: value; cas: (expected, new); read: None
    call: float
    returned: float = math.inf
    output: Any = None  # read: value seen; cas: True/False; unknown outcome: None with returned=inf
    known: bool = True


def step(value, operation: Operation):
    """(accepted, next value) of applying `operation` to a register holding `value`."""
    if operation.kind == "write":
        return True, operation.argument
    if operation.kind == "read":
        return (not operation.known or operation.output == value), value
    expected, new = operation.argument
    if not operation.known:
        return True, new if value == expected else value
    if operation.output:
        return value == expected, new
    return value != expected, value


@dataclass
class _Entry:
    operation_index: int
    is_call: bool
    time: float
    previous: Optional["_Entry"] = None
    next: Optional["_Entry"] = None
    match: Optional["_Entry"] = field(default=None, repr=False)


def is_linearizable(operations: list, initial=None) -> bool:
    entries = []
    for index, operation in enumerate(operations):
        call = _Entry(index, True, operation.call)
        ret = _Entry(index, False, operation.returned if operation.known else math.inf)
        call.match = ret
        entries += [call, ret]
    # Calls before returns at equal times: such operations overlap.
    entries.sort(key=lambda entry: (entry.time, 0 if entry.is_call else 1))
    head = _Entry(-1, True, -math.inf)
    previous = head
    for entry in entries:
        previous.next, entry.previous = entry, previous
        previous = entry

    def lift(call: _Entry) -> None:
        for entry in (call, call.match):
            entry.previous.next = entry.next
            if entry.next is not None:
                entry.next.previous = entry.previous

    def unlift(call: _Entry) -> None:
        for entry in (call.match, call):
            entry.previous.next = entry
            if entry.next is not None:
                entry.next.previous = entry

    value, linearized, stack, cache = initial, 0, [], set()
    entry = head.next
    while head.next is not None:
        if entry is None:
            return False
        if entry.is_call:
            operation = operations[entry.operation_index]
            accepted, next_value = step(value, operation)
            marked = linearized | (1 << entry.operation_index)
            if accepted and (marked, repr(next_value)) not in cache:
                cache.add((marked, repr(next_value)))
                stack.append((entry, value))
                value, linearized = next_value, marked
                lift(entry)
                entry = head.next
            else:
                entry = entry.next
        else:
            if not stack:
                return False
            entry, value = stack.pop()
            linearized &= ~(1 << entry.operation_index)
            unlift(entry)
            entry = entry.next
    return True


def _self_test() -> None:
    write = Operation("write", 1, call=0, returned=1)
    stale = Operation("read", None, call=2, returned=3, output=None)
    assert not is_linearizable([write, stale])
    fresh = Operation("read", None, call=2, returned=3, output=1)
    assert is_linearizable([write, fresh])
    overlapping = Operation("read", None, call=0.5, returned=3, output=None)
    assert is_linearizable([write, overlapping])
    lost = Operation("write", 2, call=4, returned=math.inf, known=False)
    assert is_linearizable([write, fresh, lost, Operation("read", None, call=5, returned=6, output=1)])
    assert is_linearizable([write, fresh, lost, Operation("read", None, call=5, returned=6, output=2)])
    cas = Operation("cas", (1, 3), call=4, returned=5, output=True)
    assert not is_linearizable([write, cas, Operation("read", None, call=6, returned=7, output=1)])


_self_test()
