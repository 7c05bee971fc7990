"""Code-generation problems on numbers (see ``bench.codegen_problems``)."""

from __future__ import annotations

from bench.codegen_problems import Problem, code


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
        code(
            f"""
            def fib_mod_{mod}(n):
                a, b = 0, 1
                for _ in range(n):
                    a, b = b, (a + b) % {mod}
                return a
            """
        ),
        code(
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
        code(
            f"""
            def primes_below_{limit}():
                found = []
                for n in range(2, {limit}):
                    if all(n % d for d in range(2, int(n ** 0.5) + 1)):
                        found.append(n)
                return found
            """
        ),
        code(
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
        code(
            f"""
            def max_subarray_{k}(xs):
                best = current = xs[0]
                for x in xs[1:]:
                    current = max(x, current + x)
                    best = max(best, current)
                return best
            """
        ),
        code(
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
        code(
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
        code(
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


def _family_second_largest(k: int) -> Problem:
    cases = [[3, 1, 4, 1, 5, 9, 2, 6], [10, 10, 9], [k, k + 1], [-1, -2, -3]]
    second = lambda xs: sorted(set(xs))[-2]  # noqa: E731
    return Problem(
        f"second_largest_{k}",
        f"def second_largest_{k}(xs):\n    return sorted(set(xs))[-2]\n",
        f"def second_largest_{k}(xs):\n    return sorted(xs)[-2]\n",
        "".join(f"assert candidate({xs}) == {second(xs)}\n" for xs in cases),
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


def _family_triangle(k: int) -> Problem:
    cases = [0, 1, 4, 10, 100 + k]
    return Problem(
        f"triangle_{k}",
        f"def triangle_{k}(n):\n    return n * (n + 1) // 2\n",
        f"def triangle_{k}(n):\n    return n * (n - 1) // 2\n",
        "".join(f"assert candidate({n}) == {n * (n + 1) // 2}\n" for n in cases),
    )


def _family_power(k: int) -> Problem:
    mod = 1000 + k
    cases = [(2, 10), (3, 0), (7, 13), (10, 18)]
    return Problem(
        f"power_mod_{k}",
        code(
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
        code(
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


FAMILIES = [
    _family_offsets,
    _family_multiples,
    _family_fibonacci,
    _family_primes,
    _family_gcd,
    _family_max_subarray,
    _family_binary_search,
    _family_second_largest,
    _family_digit_sum,
    _family_factorial,
    _family_binary,
    _family_collatz,
    _family_inversions,
    _family_triangle,
    _family_power,
]
