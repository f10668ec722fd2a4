"""Small wording shared by the labs' lessons: counted nouns and lists of numbers, said the same way everywhere."""

from __future__ import annotations


def count(n: int, noun: str) -> str:
    """(1, "graph") -> "1 graph"; (3, "graph") -> "3 graphs"."""
    return f"{n} {noun}{'s' * (n != 1)}"


def series(noun: str, numbers) -> str:
    """("call", [4]) -> "call 4"; [4, 5, 6] -> "calls 4 to 6"; [1, 5] -> "calls 1 and 5"."""
    numbers = list(numbers)
    if len(numbers) == 1:
        return f"{noun} {numbers[0]}"
    if len(numbers) > 2 and numbers == list(range(numbers[0], numbers[-1] + 1)):
        return f"{noun}s {numbers[0]} to {numbers[-1]}"
    return f"{noun}s {', '.join(map(str, numbers[:-1]))} and {numbers[-1]}"


def two_figures(number: float) -> str:
    """A count to two significant figures, with thousands separators: 403258 -> "400,000". For a count that rests
    on a measurement good to about that (a break-even over a gain of 0.03 ± 0.01 ms)."""
    return f"{int(float(f'{number:.2g}')):,}"
