"""Copy a jar with one Java package moved to another, as Maven's shade plugin relocates it.

Iceberg's Spark runtime jar refers to Jackson as
``org.apache.iceberg.shaded.com.fasterxml.jackson`` but does not ship it (the
Spark distribution does). No Maven repository is reachable here, so the
Debian Jackson jars are moved to that package instead: every CONSTANT_Utf8
entry of every class file's constant pool (class names, descriptors,
signatures and string literals alike) is rewritten, and so are the jar's entry
paths and its ``META-INF/services`` files. The byte layout after the constant
pool is untouched, because no index changes.

Usage: python3 relocate_jar.py FROM_PACKAGE TO_PACKAGE IN.jar OUT.jar
(packages dotted, for example ``com.fasterxml.jackson``).

Standard library only: it runs with the system python3 before the project's
virtual environment exists.
"""

from __future__ import annotations

import re
import struct
import sys
import zipfile

CLASS_MAGIC = b"\xca\xfe\xba\xbe"
TAG_UTF8 = 1
# Constant pool tag -> size of the entry after its tag byte (CONSTANT_Utf8 is
# variable and handled apart). Long and Double take two pool slots.
_FIXED_SIZES = {3: 4, 4: 4, 5: 8, 6: 8, 7: 2, 8: 2, 9: 4, 10: 4, 11: 4, 12: 4, 15: 3, 16: 2, 17: 4}
_FIXED_SIZES |= {18: 4, 19: 2, 20: 2}
_TWO_SLOTS = {5, 6}


class Relocation:
    """One package move, in its slashed (internal) and dotted (binary) spellings."""

    def __init__(self, source: str, target: str) -> None:
        self.slashed = (source.replace(".", "/") + "/", target.replace(".", "/") + "/")
        self.dotted = (source + ".", target + ".")
        # One pass for both spellings, so a replacement is never replaced again
        # (the target contains the source).
        pattern = b"|".join(re.escape(s.encode()) for s in (self.slashed[0], self.dotted[0]))
        self._pattern = re.compile(pattern)
        self._map = {
            self.slashed[0].encode(): self.slashed[1].encode(),
            self.dotted[0].encode(): self.dotted[1].encode(),
        }

    def bytes(self, data: bytes) -> bytes:
        # Both spellings are ASCII, and in (modified) UTF-8 an ASCII byte never
        # occurs inside a multi-byte sequence, so replacing raw bytes is safe.
        return self._pattern.sub(lambda m: self._map[m.group(0)], data)

    def path(self, name: str) -> str:
        return self.bytes(name.encode()).decode()


def relocate_class(data: bytes, relocation: Relocation) -> bytes:
    """The class file with every CONSTANT_Utf8 entry relocated."""
    if data[:4] != CLASS_MAGIC:
        raise ValueError("not a class file")
    (count,) = struct.unpack_from(">H", data, 8)
    out = bytearray(data[:10])
    pos = 10
    index = 1
    while index < count:
        tag = data[pos]
        if tag == TAG_UTF8:
            (length,) = struct.unpack_from(">H", data, pos + 1)
            text = relocation.bytes(data[pos + 3 : pos + 3 + length])
            if len(text) > 0xFFFF:
                raise ValueError("relocated constant is longer than a class file allows")
            out += bytes((tag,)) + struct.pack(">H", len(text)) + text
            pos += 3 + length
        elif tag in _FIXED_SIZES:
            out += data[pos : pos + 1 + _FIXED_SIZES[tag]]
            pos += 1 + _FIXED_SIZES[tag]
        else:
            raise ValueError(f"unknown constant pool tag {tag} at byte {pos}")
        index += 2 if tag in _TWO_SLOTS else 1
    out += data[pos:]
    return bytes(out)


def _skipped(name: str) -> bool:
    # A module descriptor would name the old packages, and signatures no
    # longer match the rewritten classes; the jar is used on the class path.
    base = name.rsplit("/", 1)[-1]
    if base == "module-info.class":
        return True
    return name.startswith("META-INF/") and base.rsplit(".", 1)[-1] in ("SF", "RSA", "DSA", "EC")


def relocate_jar(source: str, target: str, relocation: Relocation) -> int:
    """Write the relocated copy of ``source`` to ``target``; returns the classes rewritten."""
    classes = 0
    with zipfile.ZipFile(source) as zin, zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            if info.is_dir() or _skipped(info.filename):
                continue
            data = zin.read(info)
            if info.filename.endswith(".class"):
                data = relocate_class(data, relocation)
                classes += 1
            elif info.filename.startswith("META-INF/services/"):
                data = relocation.bytes(data)
            zout.writestr(relocation.path(info.filename), data)
    return classes


def main(argv: list[str]) -> int:
    if len(argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    source_package, target_package, source, target = argv
    classes = relocate_jar(source, target, Relocation(source_package, target_package))
    print(f"{target}: {classes} classes relocated", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
