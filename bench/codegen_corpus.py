"""A code-generation corpus: problems with a correct and a wrong completion, and checks.

Each problem is a function to write (its ``entry_point``), a ``check(candidate)``
of real asserts, and two completions: one that passes and one with a bug
(off by one, an edge case forgotten, the wrong rule). Thirty families of
problems, each in six variants (a different constant, name or rule), give 180
problems and 360 samples; eight wrong completions instead loop for ever or
crash the interpreter (``os._exit``, a segmentation fault, ``SystemExit``).

    samples(limit=None) -> list[Sample]
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Sample:
    """One completion to judge: the program, the problem's check, and what it should get."""

    sample_id: str
    problem_id: str
    entry_point: str
    completion: str
    """``solution.py``: the function (and whatever it needs)."""
    check: str
    """The problem's test: ``def check(candidate): assert ...``."""
    expected: bool
    """Whether the completion is correct (and so should pass)."""


@dataclass(frozen=True)
class Problem:
    """A problem of a family: its function, the right and a wrong body, and its asserts."""

    name: str
    correct: str
    wrong: str
    asserts: str


def _code(text: str) -> str:
    return textwrap.dedent(text).strip() + "\n"


def _family_offsets(k: int) -> Problem:
    return Problem(
        f"add_{k}",
        f"def add_{k}(x):\n    return x + {k}\n",
        f"def add_{k}(x):\n    return x + {k} if x >= 0 else x + {k - 1}\n",
        f"assert candidate(0) == {k}\nassert candidate(10) == {10 + k}\n"
        f"assert candidate(-7) == {-7 + k}\n",
    )


def _family_multiples(k: int) -> Problem:
    m = 3 + k
    total = lambda n: sum(i for i in range(n) if i % 3 == 0 or i % m == 0)  # noqa: E731
    return Problem(
        f"sum_multiples_{m}",
        f"def sum_multiples_{m}(n):\n    return sum(i for i in range(n) if i % 3 == 0 or i % {m} == 0)\n",
        f"def sum_multiples_{m}(n):\n    return sum(i for i in range(n + 1) if i % 3 == 0 or i % {m} == 0)\n",
        f"assert candidate(10) == {total(10)}\nassert candidate({m * 3}) == {total(m * 3)}\n"
        f"assert candidate(100) == {total(100)}\nassert candidate(0) == 0\n",
    )


def _family_fibonacci(k: int) -> Problem:
    mod = 1000 + 7 * k
    fib = [0, 1]
    for _ in range(60):
        fib.append(fib[-1] + fib[-2])
    return Problem(
        f"fib_mod_{mod}",
        _code(
            f"""
            def fib_mod_{mod}(n):
                a, b = 0, 1
                for _ in range(n):
                    a, b = b, (a + b) % {mod}
                return a
            """
        ),
        _code(
            f"""
            def fib_mod_{mod}(n):
                a, b = 1, 1
                for _ in range(n):
                    a, b = b, (a + b) % {mod}
                return a
            """
        ),
        "".join(f"assert candidate({n}) == {fib[n] % mod}\n" for n in (0, 1, 2, 10, 30, 55)),
    )


def _family_primes(k: int) -> Problem:
    limit = 50 + 10 * k
    primes = [n for n in range(limit) if n > 1 and all(n % d for d in range(2, int(n**0.5) + 1))]
    return Problem(
        f"primes_below_{limit}",
        _code(
            f"""
            def primes_below_{limit}():
                found = []
                for n in range(2, {limit}):
                    if all(n % d for d in range(2, int(n ** 0.5) + 1)):
                        found.append(n)
                return found
            """
        ),
        _code(
            f"""
            def primes_below_{limit}():
                found = []
                for n in range(2, {limit}):
                    if all(n % d for d in range(2, int(n ** 0.5))):
                        found.append(n)
                return found
            """
        ),
        f"assert candidate() == {primes}\nassert len(candidate()) == {len(primes)}\n",
    )


def _family_gcd(k: int) -> Problem:
    name = f"gcd_{k}"
    return Problem(
        name,
        f"def {name}(a, b):\n    while b:\n        a, b = b, a % b\n    return abs(a)\n",
        f"def {name}(a, b):\n    small, large = sorted((abs(a), abs(b)))\n"
        "    return small if large % small == 0 else 1\n",
        "assert candidate(12, 18) == 6\nassert candidate(17, 5) == 1\n"
        f"assert candidate({k * 7}, {k * 21}) == {k * 7}\nassert candidate(-4, 6) == 2\n",
    )


def _family_vowels(k: int) -> Problem:
    vowels = "aeiou" + "y" * (k % 2)
    text = ["Hello World", "AEIOU", "rhythm", "", "Chalk Queue scores agents"]
    count = lambda s: sum(c in vowels for c in s.lower())  # noqa: E731
    return Problem(
        f"count_vowels_{k}",
        f"def count_vowels_{k}(s):\n    return sum(c in {vowels!r} for c in s.lower())\n",
        f"def count_vowels_{k}(s):\n    return sum(c in {vowels!r} for c in s)\n",
        "".join(f"assert candidate({t!r}) == {count(t)}\n" for t in text),
    )


def _family_palindrome(k: int) -> Problem:
    cases = [("A man, a plan, a canal: Panama", True), ("racecar", True), ("Chalk", False)]
    cases += [("No lemon, no melon", True), ("", True), (f"ab{k}ba", True), (f"ab{k}", False)]
    return Problem(
        f"is_palindrome_{k}",
        _code(
            f"""
            def is_palindrome_{k}(s):
                kept = [c.lower() for c in s if c.isalnum()]
                return kept == kept[::-1]
            """
        ),
        _code(
            f"""
            def is_palindrome_{k}(s):
                kept = [c for c in s if c.isalnum()]
                return kept == kept[::-1]
            """
        ),
        "".join(f"assert candidate({text!r}) is {result}\n" for text, result in cases),
    )


def _family_max_subarray(k: int) -> Problem:
    cases = [[-2, 1, -3, 4, -1, 2, 1, -5, 4], [1], [-3, -1, -2], [5, 4, -1, 7, 8], [k, -k, k]]

    def best(xs: list[int]) -> int:
        top = current = xs[0]
        for x in xs[1:]:
            current = max(x, current + x)
            top = max(top, current)
        return top

    return Problem(
        f"max_subarray_{k}",
        _code(
            f"""
            def max_subarray_{k}(xs):
                best = current = xs[0]
                for x in xs[1:]:
                    current = max(x, current + x)
                    best = max(best, current)
                return best
            """
        ),
        _code(
            f"""
            def max_subarray_{k}(xs):
                best = current = 0
                for x in xs:
                    current = max(x, current + x)
                    best = max(best, current)
                return best
            """
        ),
        "".join(f"assert candidate({xs}) == {best(xs)}\n" for xs in cases),
    )


def _family_binary_search(k: int) -> Problem:
    xs = list(range(0, 40 + 2 * k, 2))
    return Problem(
        f"find_{k}",
        _code(
            f"""
            def find_{k}(xs, target):
                low, high = 0, len(xs) - 1
                while low <= high:
                    middle = (low + high) // 2
                    if xs[middle] == target:
                        return middle
                    if xs[middle] < target:
                        low = middle + 1
                    else:
                        high = middle - 1
                return -1
            """
        ),
        _code(
            f"""
            def find_{k}(xs, target):
                low, high = 0, len(xs) - 1
                while low < high:
                    middle = (low + high) // 2
                    if xs[middle] == target:
                        return middle
                    if xs[middle] < target:
                        low = middle + 1
                    else:
                        high = middle - 1
                return -1
            """
        ),
        f"xs = {xs}\n"
        + "".join(f"assert candidate(xs, {t}) == {xs.index(t)}\n" for t in (xs[0], xs[-1], xs[5]))
        + "assert candidate(xs, 7) == -1\nassert candidate([], 1) == -1\n",
    )


def _family_run_length(k: int) -> Problem:
    texts = ["aaabccdddd", "", "abc", "zzzzzz", "x" * (k + 2) + "y"]

    def encode(s: str) -> str:
        out, i = "", 0
        while i < len(s):
            j = i
            while j < len(s) and s[j] == s[i]:
                j += 1
            out += f"{j - i}{s[i]}"
            i = j
        return out

    return Problem(
        f"rle_{k}",
        _code(
            f"""
            def rle_{k}(s):
                out, i = "", 0
                while i < len(s):
                    j = i
                    while j < len(s) and s[j] == s[i]:
                        j += 1
                    out += f"{{j - i}}{{s[i]}}"
                    i = j
                return out
            """
        ),
        _code(
            f"""
            def rle_{k}(s):
                out, i = "", 0
                while i < len(s):
                    j = i
                    while j < len(s) and s[j] == s[i]:
                        j += 1
                    out += f"{{j - i}}{{s[i]}}" if j - i > 1 else s[i]
                    i = j
                return out
            """
        ),
        "".join(f"assert candidate({t!r}) == {encode(t)!r}\n" for t in texts),
    )


def _family_rotate(k: int) -> Problem:
    xs = list(range(1, 8))
    rotate = lambda ys, n: ys[-(n % len(ys)) :] + ys[: -(n % len(ys))] if ys else []  # noqa: E731
    return Problem(
        f"rotate_{k}",
        f"def rotate_{k}(xs, n):\n    if not xs:\n        return []\n    n %= len(xs)\n"
        "    return xs[-n:] + xs[:-n] if n else list(xs)\n",
        f"def rotate_{k}(xs, n):\n    if not xs:\n        return []\n    return xs[-n:] + xs[:-n]\n",
        "".join(f"assert candidate({xs}, {n}) == {rotate(xs, n)}\n" for n in (0, 1, k + 2, 7, 9))
        + "assert candidate([], 3) == []\n",
    )


def _family_second_largest(k: int) -> Problem:
    cases = [[3, 1, 4, 1, 5, 9, 2, 6], [10, 10, 9], [k, k + 1], [-1, -2, -3]]
    second = lambda xs: sorted(set(xs))[-2]  # noqa: E731
    return Problem(
        f"second_largest_{k}",
        f"def second_largest_{k}(xs):\n    return sorted(set(xs))[-2]\n",
        f"def second_largest_{k}(xs):\n    return sorted(xs)[-2]\n",
        "".join(f"assert candidate({xs}) == {second(xs)}\n" for xs in cases),
    )


def _family_caesar(k: int) -> Problem:
    shift = k + 1
    texts = ["hello", "Chalk Queue!", "xyz", ""]

    def caesar(s: str) -> str:
        out = []
        for c in s:
            if c.isalpha():
                base = ord("a") if c.islower() else ord("A")
                out.append(chr((ord(c) - base + shift) % 26 + base))
            else:
                out.append(c)
        return "".join(out)

    body = _code(
        f"""
        def caesar_{shift}(s):
            out = []
            for c in s:
                if c.isalpha():
                    base = ord("a") if c.islower() else ord("A")
                    out.append(chr((ord(c) - base + {shift}) % 26 + base))
                else:
                    out.append(c)
            return "".join(out)
        """
    )
    return Problem(
        f"caesar_{shift}",
        body,
        body.replace("% 26 + base", "+ base"),
        "".join(f"assert candidate({t!r}) == {caesar(t)!r}\n" for t in texts),
    )


def _family_digit_sum(k: int) -> Problem:
    cases = [0, 7, 1234, 99999, 10**k + 5]
    return Problem(
        f"digit_sum_{k}",
        f"def digit_sum_{k}(n):\n    return sum(int(d) for d in str(abs(n)))\n",
        f"def digit_sum_{k}(n):\n    return sum(int(d) for d in str(abs(n))[1:])\n",
        "".join(f"assert candidate({n}) == {sum(int(d) for d in str(n))}\n" for n in cases),
    )


def _family_factorial(k: int) -> Problem:
    mod = 10**9 + 7 + k * 2
    import math

    cases = [0, 1, 5, 20, 50]
    return Problem(
        f"factorial_mod_{k}",
        f"def factorial_mod_{k}(n):\n    out = 1\n    for i in range(2, n + 1):\n"
        f"        out = out * i % {mod}\n    return out\n",
        f"def factorial_mod_{k}(n):\n    out = 1\n    for i in range(2, n):\n"
        f"        out = out * i % {mod}\n    return out\n",
        "".join(f"assert candidate({n}) == {math.factorial(n) % mod}\n" for n in cases),
    )


def _family_merge(k: int) -> Problem:
    cases = [([1, 3, 5], [2, 4, 6]), ([], [1]), ([1, 2], []), ([k], [k, k + 1])]
    return Problem(
        f"merge_{k}",
        _code(
            f"""
            def merge_{k}(a, b):
                out, i, j = [], 0, 0
                while i < len(a) and j < len(b):
                    if a[i] <= b[j]:
                        out.append(a[i])
                        i += 1
                    else:
                        out.append(b[j])
                        j += 1
                return out + a[i:] + b[j:]
            """
        ),
        _code(
            f"""
            def merge_{k}(a, b):
                out, i, j = [], 0, 0
                while i < len(a) and j < len(b):
                    if a[i] <= b[j]:
                        out.append(a[i])
                        i += 1
                    else:
                        out.append(b[j])
                        j += 1
                return out + a[i:]
            """
        ),
        "".join(f"assert candidate({a}, {b}) == {sorted(a + b)}\n" for a, b in cases),
    )


def _family_word_count(k: int) -> Problem:
    text = f"the cat and the hat and the bat {k}"
    counts: dict[str, int] = {}
    for word in text.split():
        counts[word] = counts.get(word, 0) + 1
    return Problem(
        f"word_counts_{k}",
        f"def word_counts_{k}(text):\n    counts = {{}}\n    for word in text.split():\n"
        "        counts[word] = counts.get(word, 0) + 1\n    return counts\n",
        f"def word_counts_{k}(text):\n    return {{word: 1 for word in text.split()}}\n",
        f"assert candidate({text!r}) == {counts!r}\nassert candidate('') == {{}}\n",
    )


def _family_transpose(k: int) -> Problem:
    matrix = [[r * (k + 3) + c for c in range(k % 3 + 2)] for r in range(3)]
    return Problem(
        f"transpose_{k}",
        f"def transpose_{k}(m):\n    return [list(row) for row in zip(*m)]\n",
        f"def transpose_{k}(m):\n    return [list(row) for row in m]\n",
        f"assert candidate({matrix}) == {[list(r) for r in zip(*matrix, strict=True)]}\n"
        "assert candidate([[1, 2], [3, 4]]) == [[1, 3], [2, 4]]\n",
    )


def _family_brackets(k: int) -> Problem:
    cases = [("()[]{}", True), ("([)]", False), ("((()))", True), ("(", False), ("", True)]
    cases.append(("{[" * (k + 1) + "]}" * (k + 1), True))
    return Problem(
        f"balanced_{k}",
        _code(
            f"""
            def balanced_{k}(s):
                pairs, stack = {{")": "(", "]": "[", "}}": "{{"}}, []
                for c in s:
                    if c in "([{{":
                        stack.append(c)
                    elif not stack or stack.pop() != pairs[c]:
                        return False
                return not stack
            """
        ),
        _code(
            f"""
            def balanced_{k}(s):
                return s.count("(") == s.count(")") and s.count("[") == s.count("]")
            """
        ),
        "".join(f"assert candidate({s!r}) is {r}\n" for s, r in cases),
    )


def _family_roman(k: int) -> Problem:
    cases = {"III": 3, "IV": 4, "IX": 9, "LVIII": 58, "MCMXCIV": 1994, "XL" * (k % 2 + 1): 0}
    cases = {key: value for key, value in cases.items() if value}
    return Problem(
        f"roman_{k}",
        _code(
            f"""
            def roman_{k}(s):
                values = {{"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}}
                total = 0
                for i, c in enumerate(s):
                    if i + 1 < len(s) and values[c] < values[s[i + 1]]:
                        total -= values[c]
                    else:
                        total += values[c]
                return total
            """
        ),
        _code(
            f"""
            def roman_{k}(s):
                values = {{"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}}
                return sum(values[c] for c in s)
            """
        ),
        "".join(f"assert candidate({s!r}) == {v}\n" for s, v in cases.items()),
    )


def _family_binary(k: int) -> Problem:
    cases = [0, 1, 2, 5, 255, 1024 + k]
    return Problem(
        f"to_binary_{k}",
        f"def to_binary_{k}(n):\n    return bin(n)[2:]\n",
        f"def to_binary_{k}(n):\n    out = ''\n    while n:\n        out = str(n % 2) + out\n"
        "        n //= 2\n    return out\n",
        "".join(f"assert candidate({n}) == {bin(n)[2:]!r}\n" for n in cases),
    )


def _family_collatz(k: int) -> Problem:
    def steps(n: int) -> int:
        count = 0
        while n != 1:
            n = n // 2 if n % 2 == 0 else 3 * n + 1
            count += 1
        return count

    cases = [1, 6, 7, 27, 97 + k]
    return Problem(
        f"collatz_{k}",
        f"def collatz_{k}(n):\n    count = 0\n    while n != 1:\n"
        "        n = n // 2 if n % 2 == 0 else 3 * n + 1\n        count += 1\n    return count\n",
        f"def collatz_{k}(n):\n    count = 1\n    while n != 1:\n"
        "        n = n // 2 if n % 2 == 0 else 3 * n + 1\n        count += 1\n    return count\n",
        "".join(f"assert candidate({n}) == {steps(n)}\n" for n in cases),
    )


def _family_anagram(k: int) -> Problem:
    cases = [("listen", "silent", True), ("Dormitory", "dirty room", True), ("ab", "abc", False)]
    cases.append((f"chalk{k}", f"{k}klahc", True))
    return Problem(
        f"anagram_{k}",
        f"def anagram_{k}(a, b):\n    key = lambda s: sorted(s.replace(' ', '').lower())\n"
        "    return key(a) == key(b)\n",
        f"def anagram_{k}(a, b):\n    return sorted(a) == sorted(b)\n",
        "".join(f"assert candidate({a!r}, {b!r}) is {r}\n" for a, b, r in cases),
    )


def _family_inversions(k: int) -> Problem:
    cases = [[1, 2, 3], [3, 2, 1], [2, 4, 1, 3, 5], list(range(k + 5, 0, -1))]
    count = lambda xs: sum(xs[i] > xs[j] for i in range(len(xs)) for j in range(i + 1, len(xs)))  # noqa: E731
    return Problem(
        f"inversions_{k}",
        f"def inversions_{k}(xs):\n    return sum(xs[i] > xs[j] for i in range(len(xs))"
        " for j in range(i + 1, len(xs)))\n",
        f"def inversions_{k}(xs):\n    return sum(xs[i] > xs[i + 1] for i in range(len(xs) - 1))\n",
        "".join(f"assert candidate({xs}) == {count(xs)}\n" for xs in cases),
    )


def _family_prefix(k: int) -> Problem:
    cases = [(["flower", "flow", "flight"], "fl"), (["dog", "racecar"], ""), ([f"ab{k}"], f"ab{k}")]
    cases.append(([], ""))
    return Problem(
        f"common_prefix_{k}",
        _code(
            f"""
            def common_prefix_{k}(words):
                if not words:
                    return ""
                prefix = words[0]
                for word in words[1:]:
                    while not word.startswith(prefix):
                        prefix = prefix[:-1]
                return prefix
            """
        ),
        _code(
            f"""
            def common_prefix_{k}(words):
                if not words:
                    return ""
                return min(words)
            """
        ),
        "".join(f"assert candidate({w!r}) == {p!r}\n" for w, p in cases),
    )


def _family_chunks(k: int) -> Problem:
    size = k % 4 + 2
    xs = list(range(11))
    return Problem(
        f"chunks_of_{k}",
        f"def chunks_of_{k}(xs):\n    return [xs[i:i + {size}] for i in range(0, len(xs), {size})]\n",
        f"def chunks_of_{k}(xs):\n    return [xs[i:i + {size}] for i in range(0, len(xs) - {size}, {size})]\n",
        f"assert candidate({xs}) == {[xs[i : i + size] for i in range(0, len(xs), size)]}\n"
        "assert candidate([]) == []\n",
    )


def _family_triangle(k: int) -> Problem:
    cases = [0, 1, 4, 10, 100 + k]
    return Problem(
        f"triangle_{k}",
        f"def triangle_{k}(n):\n    return n * (n + 1) // 2\n",
        f"def triangle_{k}(n):\n    return n * (n - 1) // 2\n",
        "".join(f"assert candidate({n}) == {n * (n + 1) // 2}\n" for n in cases),
    )


def _family_flatten(k: int) -> Problem:
    nested = [1, [2, [3, [4, [k]]]], [], [[5], 6]]
    flat: list[int] = []

    def walk(item: object) -> None:
        if isinstance(item, list):
            for part in item:
                walk(part)
        else:
            flat.append(item)  # type: ignore[arg-type]

    walk(nested)
    return Problem(
        f"flatten_{k}",
        _code(
            f"""
            def flatten_{k}(items):
                out = []
                for item in items:
                    if isinstance(item, list):
                        out.extend(flatten_{k}(item))
                    else:
                        out.append(item)
                return out
            """
        ),
        _code(
            f"""
            def flatten_{k}(items):
                out = []
                for item in items:
                    if isinstance(item, list):
                        out.extend(item)
                    else:
                        out.append(item)
                return out
            """
        ),
        f"assert candidate({nested}) == {flat}\nassert candidate([]) == []\n",
    )


def _family_dedupe(k: int) -> Problem:
    xs = [3, 1, 3, 2, 1, k, k, 5]
    seen: list[int] = []
    for x in xs:
        if x not in seen:
            seen.append(x)
    return Problem(
        f"dedupe_{k}",
        f"def dedupe_{k}(xs):\n    return list(dict.fromkeys(xs))\n",
        f"def dedupe_{k}(xs):\n    return sorted(set(xs))\n",
        f"assert candidate({xs}) == {seen}\nassert candidate([]) == []\n",
    )


def _family_title(k: int) -> Problem:
    texts = ["hello world", "chalk queue scores", "a", f"x{k} y"]
    return Problem(
        f"capitalize_words_{k}",
        f"def capitalize_words_{k}(s):\n    return ' '.join(w[:1].upper() + w[1:] for w in s.split(' '))\n",
        f"def capitalize_words_{k}(s):\n    return s.capitalize()\n",
        "".join(
            f"assert candidate({t!r}) == {' '.join(w[:1].upper() + w[1:] for w in t.split(' '))!r}\n"
            for t in texts
        ),
    )


def _family_power(k: int) -> Problem:
    mod = 1000 + k
    cases = [(2, 10), (3, 0), (7, 13), (10, 18)]
    return Problem(
        f"power_mod_{k}",
        _code(
            f"""
            def power_mod_{k}(base, exponent):
                result, base = 1, base % {mod}
                while exponent:
                    if exponent & 1:
                        result = result * base % {mod}
                    base = base * base % {mod}
                    exponent >>= 1
                return result
            """
        ),
        _code(
            f"""
            def power_mod_{k}(base, exponent):
                result = 1
                while exponent > 1:
                    result = result * base % {mod}
                    exponent -= 1
                return result
            """
        ),
        "".join(f"assert candidate({b}, {e}) == {pow(b, e, mod)}\n" for b, e in cases),
    )


FAMILIES: list[Callable[[int], Problem]] = [
    _family_offsets,
    _family_multiples,
    _family_fibonacci,
    _family_primes,
    _family_gcd,
    _family_vowels,
    _family_palindrome,
    _family_max_subarray,
    _family_binary_search,
    _family_run_length,
    _family_rotate,
    _family_second_largest,
    _family_caesar,
    _family_digit_sum,
    _family_factorial,
    _family_merge,
    _family_word_count,
    _family_transpose,
    _family_brackets,
    _family_roman,
    _family_binary,
    _family_collatz,
    _family_anagram,
    _family_inversions,
    _family_prefix,
    _family_chunks,
    _family_triangle,
    _family_flatten,
    _family_dedupe,
    _family_power,
]
VARIANTS = 6

MISBEHAVING = [
    "    while True:\n        pass\n",
    "    import ctypes\n    return ctypes.string_at(0)\n",
    "    import os\n    os._exit(0)\n",
    "    raise SystemExit(0)\n",
    "    import time\n    time.sleep(60)\n",
    "    return undefined_name\n",
    "    n = 1\n    while n:\n        n += 1\n",
    "    import sys\n    sys.stdout.write('x' * 200000)\n    return None\n",
]
"""Bodies that replace a few wrong completions: three loop, three end the interpreter
(a segmentation fault, ``os._exit``, ``SystemExit``), one fails, one prints 200 kB."""


def _misbehaving(problem: Problem, body: str) -> str:
    first_line = problem.correct.splitlines()[0]  # the def line
    return f"{first_line}\n{body}"


def samples(limit: int | None = None) -> list[Sample]:
    """The corpus: each problem's correct then wrong sample (``limit``: the first ones only).

    With a limit, fewer misbehave (one per ten samples, at least a loop and a
    crash), spread through the kept problems: a smoke run stays short.
    """
    problems = [family(k) for k in range(1, VARIANTS + 1) for family in FAMILIES]
    misbehaving = MISBEHAVING
    if limit is not None:
        problems = problems[: max(1, limit // 2)]
        misbehaving = MISBEHAVING[: max(2, limit // 10)]
    found: list[Sample] = []
    spread = max(1, len(problems) // len(misbehaving))
    for number, problem in enumerate(problems):
        check = f"def check(candidate):\n{textwrap.indent(problem.asserts, '    ')}"
        pid = f"p{number:03d}-{problem.name}"
        wrong = problem.wrong
        if number % spread == spread // 2 and number // spread < len(misbehaving):
            wrong = _misbehaving(problem, misbehaving[number // spread])
        for suffix, completion, expected in (("ok", problem.correct, True), ("bug", wrong, False)):
            found.append(Sample(f"{pid}-{suffix}", pid, problem.name, completion, check, expected))
    return found
