#!/usr/bin/python3
"""Checks one tensor of a safetensors file with the standard library only.

usage: read_safetensors.py FILE NAME DTYPE SHAPE(comma-separated) EXPECTED_BYTES_FILE
Exit status 0 when the tensor's dtype, shape and bytes are the expected ones.
"""
import json
import struct
import sys

path, name, dtype, shape, expected_path = sys.argv[1:6]
with open(path, "rb") as f:
    (header_len,) = struct.unpack("<Q", f.read(8))
    header = json.loads(f.read(header_len))
    info = header[name]
    begin, end = info["data_offsets"]
    f.seek(8 + header_len + begin)
    data = f.read(end - begin)
with open(expected_path, "rb") as f:
    expected = f.read()
want_shape = [int(d) for d in shape.split(",")]
problems = []
if info["dtype"] != dtype:
    problems.append("dtype %s, expected %s" % (info["dtype"], dtype))
if info["shape"] != want_shape:
    problems.append("shape %s, expected %s" % (info["shape"], want_shape))
if data != expected:
    problems.append("bytes differ (%d vs %d bytes)" % (len(data), len(expected)))
if problems:
    print("%s in %s: %s" % (name, path, "; ".join(problems)))
    sys.exit(1)
print("%s in %s: %s %s, %d bytes match" % (name, path, dtype, want_shape, len(data)))
