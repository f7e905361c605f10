"""Writing and reading small .npy files without numpy (the tests run on a bare Python)."""
import ast
import struct

CODES = {"<i8": "q", "<f4": "f", "<i4": "i", "|u1": "B"}


def write_npy(path, descr, shape, values):
    """A C-order little-endian array of `descr` ('<f4', '<i8', '<i4', '|u1') and `shape`."""
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (
        descr, "".join("%d, " % s for s in shape) if len(shape) == 1 else
        ", ".join(str(s) for s in shape))
    header += " " * (63 - (10 + len(header)) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        f.write(struct.pack("<%d%s" % (len(values), CODES[descr]), *values))


def read_npy(path):
    """(shape, values) of a version 1.0 .npy file of one of the dtypes above."""
    with open(path, "rb") as f:
        data = f.read()
    length = struct.unpack("<H", data[8:10])[0]
    header = ast.literal_eval(data[10:10 + length].decode())
    count = 1
    for d in header["shape"]:
        count *= d
    return header["shape"], struct.unpack("<%d%s" % (count, CODES[header["descr"]]),
                                          data[10 + length:])
