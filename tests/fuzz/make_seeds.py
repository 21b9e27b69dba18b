#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (tests/fuzz/corpus/<target>/), replayed by ctest in every
build and the starting point of scripts/fuzz.sh. Deterministic: run it again after changing a format and
commit the result. Inputs that once crashed a target go in by hand (corpus/<target>/crash-*), never
regenerated away."""
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus")
FIXTURES = os.path.join(HERE, "..", "topo", "fixtures")


def write(target, name, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def unique_ids():
    def id_hex(magic=0x494D5953, version=2):
        raw = struct.pack("<IHH", magic, version, 0) + bytes(range(16)) + bytes(range(100, 132)) + struct.pack("<iI", 1234, 1700000000)
        assert len(raw) == 64
        return raw.hex()
    write("unique_id", "valid", id_hex())
    write("unique_id", "valid-upper", id_hex().upper())
    write("unique_id", "version1", id_hex(version=1))
    write("unique_id", "bad-magic", id_hex(magic=0))
    write("unique_id", "short", id_hex()[:100])
    write("unique_id", "non-hex", "zz" + id_hex()[2:])
    write("unique_id", "empty", "")


def params():
    for i, s in enumerate(["4096", "64K", "32MiB", "2GiB", "1gb", " -1", "-5", "+1", "0x10", "",
                           "18446744073709551615", "18446744073709551616", "99999999999999999999G",
                           "9223372036854775807", "-9223372036854775808", "007", "-0", "12Q", "4k "]):
        write("params", "p%02d" % i, s)


def tune():
    write("tune", "valid", "[fpA]\nall_reduce 4K oneshot_pull\nall_reduce inf staged\n"
                           "[other]\nall_gather 1M twoshot_push\n")
    write("tune", "comments", "# symmem tune table\n[fpA]  # this machine\nreduce_scatter 64KiB twoshot_pull # x\n")
    write("tune", "long-comment", "[fpA]\n#" + " " * 510 + "all_reduce 1K staged\nall_reduce inf oneshot_pull\n")
    write("tune", "long-rule", "[fpA]\nall_reduce" + " " * 600 + "1K staged\n")
    write("tune", "bad-size", "[fpA]\nall_reduce 12Q oneshot_push\n")
    write("tune", "bad-op", "[fpA]\nteleport 4K oneshot_push\n")
    write("tune", "no-bracket", "[fpA\nall_reduce 4K oneshot_push\n")
    write("tune", "auto", "[fpA]\nall_reduce 4K auto\n")
    write("tune", "crlf", "[fpA]\r\nall_reduce 4K oneshot_push\r\n")


def fixture_tree(name):
    """A fixture directory in fuzz_topo_sysfs's record form."""
    base = os.path.join(FIXTURES, name)
    out = bytearray()
    for dirpath, dirnames, filenames in sorted(os.walk(base)):
        dirnames.sort()
        rel_dir = os.path.relpath(dirpath, base)
        for n in sorted(filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]):
            full = os.path.join(dirpath, n)
            rel = os.path.normpath(os.path.join(rel_dir, n))
            if os.path.islink(full):
                out += b"L %s %s\n" % (rel.encode(), os.readlink(full).encode())
            elif os.path.isfile(full):
                data = open(full, "rb").read()
                out += b"F %s %d\n" % (rel.encode(), len(data)) + data
        if not filenames and not dirnames:
            out += b"D %s\n" % rel_dir.encode()
    return bytes(out)


def topo():
    for name in sorted(os.listdir(FIXTURES)):
        if name == "golden" or not os.path.isdir(os.path.join(FIXTURES, name)):
            continue
        write("topo_sysfs", name, fixture_tree(name))
        gpus = os.path.join(FIXTURES, name, "gpus.json")
        if os.path.exists(gpus):
            write("topo_json", name, open(gpus, "rb").read())
    write("topo_sysfs", "empty-iommu", b"D sys/bus/pci/devices\nD sys/class/iommu\n")
    write("topo_json", "out-of-range",
          '{"schema": "symmem-gpus/1", "gpus": [{"bus_id": "0000:01:00.0", "cc_major": 1e300, "sm_count": -1}]}')
    write("topo_json", "pairs",
          '{"schema": "symmem-gpus/1", "measured": 1, "gpus": [{"bus_id": "0000:01:00.0", "host_read_gbs": 20},'
          ' {"bus_id": "0000:02:00.0"}], "pairs": [{"gpu": 0, "peer": 1, "p2p": 1, "nvlinks": 4, "read_gbs": 40.5,'
          ' "latency_us": 1.2}, {"gpu": 1, "peer": 0, "p2p": 1, "perf_rank": 0}]}')
    write("topo_json", "nested", "[" * 100 + "]" * 100)
    write("topo_json", "escapes", '{"schema": "symmem-gpus/1", "gpus": [{"bus_id": "0000:01:00.0", "name": "\\u00e9\\n\\ud83d"}]}')


HDR = struct.Struct("<IHHQIiiI")  # boot/bootmsg.h: symmem_boot_hdr_t, 32 bytes
HELLO, CHALLENGE, PROOF, WELCOME, ABORT, DATA, FD = range(1, 8)


def msg(type_, payload=b"", rank=0, nranks=3, seq=0, length=None, nfds=None, magic=0x424D5953, proto=2):
    if length is None:
        length = len(payload)
    if nfds is None:
        nfds = 1 if type_ == FD else 0
    return HDR.pack(magic, proto, type_, seq, length, rank, nranks, nfds) + payload


def bootmsg():
    hs, data = b"\x00", b"\x01"  # first byte: payload limit of a handshake connection / the data phase
    hello = msg(HELLO, bytes(32), rank=0)
    write("bootmsg", "hello", hs + hello)
    write("bootmsg", "handshake", hs + hello + msg(CHALLENGE, bytes(64), rank=1) + msg(PROOF, bytes(32)) +
          msg(WELCOME, struct.pack("<iI", 0, 0), rank=1))
    write("bootmsg", "abort", hs + msg(ABORT, struct.pack("<i", 11) + b"rank 2: communicator init: timed out"))
    write("bootmsg", "data", data + msg(DATA, b"x" * 96, seq=1) + msg(FD, struct.pack("<Q", 1), seq=2))
    write("bootmsg", "oversized", hs + msg(DATA, length=0xFFFFFFFF))
    write("bootmsg", "rank-minus-1002", hs + msg(HELLO, bytes(32), rank=-1002))
    write("bootmsg", "partial", hs + hello[:20])
    write("bootmsg", "cut-short", data + msg(DATA, b"z" * 8, seq=3)[:6] + msg(DATA, b"z" * 8, seq=3))
    write("bootmsg", "junk", hs + b"\x5a" * 64)
    write("bootmsg", "old-protocol", hs + msg(HELLO, bytes(32), proto=1))
    write("bootmsg", "fd-count", data + msg(DATA, b"y", nfds=200))


def main():
    unique_ids()
    params()
    tune()
    topo()
    bootmsg()
    return 0


if __name__ == "__main__":
    sys.exit(main())
