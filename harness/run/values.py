"""What a record's value holds: its identity, and with a size asked, padding derived from it.

A record's identity is the integer the checkers read (docs/history.md): unique in a run,
it names the write. With no size asked (a plan without `mix.value_bytes`), the value is
that integer in decimal, as it always was, so old histories and kept counterexamples
check the same. With a size asked, the value is exactly that many bytes:

    <identity>:<c|r><size>:<padding>

`c` (compressible) or `r` (random) names the padding's content; `size` is the value's
whole length in bytes. The padding is derived from the identity alone, byte for byte,
so whoever reads the value back can tell whether it is the one its identity made:

- compressible: the SHA-256 of `onceproof:<identity>` in hex and a space (65 bytes),
  repeated: text that compresses about a hundredfold, as most application data
  compresses well;
- random: SHA-512 in counter mode, block i the digest of `onceproof:<identity>`
  followed by i as 4 bytes big-endian: incompressible.

The Java agent (run/java/OnceproofAgent.java, `Values`) makes and reads the same bytes.
No pandas, numpy or Arrow: a client process imports this.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

from onceproof.workloads.plan import COMPRESSIBLE, MAX_VALUE_BYTES, MIN_VALUE_BYTES, RANDOM

CONTENT_CODES = {COMPRESSIBLE: b"c", RANDOM: b"r"}
# The identity of a value that names none (its first field is no integer): a history's
# record always has a value, and no write has this one.
NO_IDENTITY = -1
CONTENT_OF = {code: name for name, code in CONTENT_CODES.items()}
_SEED = b"onceproof:%d"


def padding(identity: int, n: int, content: str = COMPRESSIBLE) -> bytes:
    """The first n bytes of the padding identity makes."""
    seed = _SEED % identity
    if content == COMPRESSIBLE:
        unit = hashlib.sha256(seed).hexdigest().encode() + b" "
        return (unit * (n // len(unit) + 1))[:n]
    base = hashlib.sha512(seed)
    blocks = []
    for i in range(-(-n // 64)):
        h = base.copy()
        h.update(i.to_bytes(4, "big"))
        blocks.append(h.digest())
    return b"".join(blocks)[:n]


def header(identity: int, size: int, content: str = COMPRESSIBLE) -> bytes:
    return b"%d:%s%d:" % (identity, CONTENT_CODES[content], size)


def encode(identity: int, size: int | None = None, content: str = COMPRESSIBLE) -> bytes:
    """The value of the record `identity` names: its decimal alone without a size, else
    exactly `size` bytes (from MIN_VALUE_BYTES: the header fits)."""
    if size is None:
        return str(identity).encode()
    head = header(identity, size, content)
    return head + padding(identity, size - len(head), content)


def decode(data: bytes) -> tuple[int, int | None]:
    """(identity, corrupt) of a value read back: the identity its first field names
    (NO_IDENTITY when it names none), and where the value first differs from the one that
    identity makes (its length when one is a prefix of the other), or None when it is
    byte for byte that value. A value without a size (a decimal alone) is read as the
    integer, as it always was."""
    head, sep, rest = data.partition(b":")
    if not sep:
        try:
            return int(data), None
        except ValueError:
            return NO_IDENTITY, 0
    try:
        identity = int(head)
    except ValueError:
        return NO_IDENTITY, 0
    spec = rest.partition(b":")[0]
    content = CONTENT_OF.get(spec[:1])
    try:
        size = int(spec[1:])
    except ValueError:
        size = -1
    if content is None or not MIN_VALUE_BYTES <= size <= MAX_VALUE_BYTES:
        return identity, len(head) + 1
    return identity, first_difference(data, encode(identity, size, content))


def first_difference(got: bytes, want: bytes) -> int | None:
    """Where `got` first differs from `want` (the shorter's length when one is the
    other's prefix), or None when they are equal."""
    if got == want:
        return None
    n = min(len(got), len(want))
    lo = 0
    # Halving over slices: C-speed compares, not a loop over 16 KiB byte by byte.
    while n - lo > 64:
        mid = (lo + n) // 2
        if got[lo:mid] == want[lo:mid]:
            lo = mid
        else:
            n = mid
    for i in range(lo, n):
        if got[i] != want[i]:
            return i
    return n


@dataclass(frozen=True)
class Shape:
    """The values a plan's writers make: their sizes (None: the identity alone) and what
    fills them. A record's size is drawn from `sizes` by its identity, so a run's writers
    on either backend draw the same size for the same identity."""
    sizes: tuple[int, ...] | None = None
    content: str = COMPRESSIBLE

    @classmethod
    def of(cls, plan: dict) -> Shape:
        mix = plan.get("mix") or {}
        sizes = mix.get("value_bytes")
        if sizes is not None and not isinstance(sizes, (list, tuple)):
            sizes = [sizes]
        return cls(tuple(sizes) if sizes else None, mix.get("value_content", COMPRESSIBLE))

    def size(self, identity: int) -> int | None:
        if not self.sizes:
            return None
        if len(self.sizes) == 1:
            return self.sizes[0]
        return self.sizes[draw(identity) % len(self.sizes)]

    def encode(self, identity: int, size: int | None) -> bytes:
        return encode(identity, size, self.content)

    def to_dict(self) -> dict:
        """What the Java agent is given (run/jvm.py)."""
        return {"sizes": list(self.sizes) if self.sizes else None, "content": self.content}


# Values without a size: the identity alone, as before.
PLAIN = Shape()


def draw(identity: int) -> int:
    """A well-mixed number from an identity (Fibonacci hashing: the identity times 2^64
    over the golden ratio, mod 2^64, its high 32 bits), so that sizes drawn by identity
    do not follow the partition a record goes to (identity mod partitions)."""
    return ((identity * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF) >> 32
