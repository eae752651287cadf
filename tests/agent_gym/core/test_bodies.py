"""BodyReader: the decoded size of a body is bounded as it streams, whatever its encoding."""

from __future__ import annotations

import gzip
import zlib

import pytest

from agent_gym.core.bodies import BodyError, BodyReader, BodyTooLarge, UnsupportedEncoding


@pytest.mark.parametrize("encoding", [None, "", "identity", "IDENTITY "])
def test_identity_is_kept_up_to_exactly_the_cap(encoding):
    reader = BodyReader(encoding, cap=10)
    reader.feed(b"12345")
    reader.feed(b"67890")  # exactly 10: allowed
    assert bytes(reader.finish()) == b"1234567890"
    with pytest.raises(BodyTooLarge, match="more than 10 bytes"):
        reader.feed(b"x")  # the 11th byte


@pytest.mark.parametrize(
    ("encoding", "pack"), [("gzip", gzip.compress), ("deflate", zlib.compress), ("x-gzip", gzip.compress)]
)
def test_gzip_and_deflate_decode_in_pieces_to_the_cap(encoding, pack):
    data = pack(b"a" * 10)
    reader = BodyReader(encoding, cap=10)
    for i in range(len(data)):  # one raw byte at a time, as a dripping server sends it
        reader.feed(data[i : i + 1])
    assert bytes(reader.finish()) == b"a" * 10
    with pytest.raises(BodyTooLarge):
        BodyReader(encoding, cap=9).feed(data)


def test_a_bomb_decodes_no_more_than_the_cap_plus_one():
    bomb = gzip.compress(b"\0" * 2**26)  # 64 MiB of zeros in about 64 KiB
    reader = BodyReader("gzip", cap=1000)
    with pytest.raises(BodyTooLarge):
        reader.feed(bomb)
    assert len(reader.body) <= 1000  # nothing past the cap was kept
    assert len(reader._inflate.unconsumed_tail) > len(bomb) // 2  # and most of it was never inflated


@pytest.mark.parametrize("encoding", ["br", "zstd", "compress", "gzip, br", "gzip, gzip"])
def test_other_encodings_are_refused_before_reading(encoding):
    with pytest.raises(UnsupportedEncoding, match="which was not asked for"):
        BodyReader(encoding, cap=10)


def test_corrupt_and_truncated_compressed_bodies_are_errors():
    with pytest.raises(BodyError, match="corrupt"):
        BodyReader("gzip", cap=100).feed(b"not gzip at all")
    reader = BodyReader("gzip", cap=100)
    reader.feed(gzip.compress(b"hello world")[:-12])  # cut inside the deflate stream
    with pytest.raises(BodyError, match="cut short"):
        reader.finish()
    with pytest.raises(ValueError, match="cap must be >= 1"):
        BodyReader(None, cap=0)
