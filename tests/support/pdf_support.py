"""Hand-built PDFs for the index tests: a file of numbered objects with a correct
cross-reference table, so pypdf reads it as a well-formed PDF."""

from __future__ import annotations


def pdf_bytes(objects: list[bytes]) -> bytes:
    """A PDF of ``objects`` (object i + 1 is ``objects[i]``; 1 is the catalog), with a
    correct cross-reference table."""
    out, offsets = bytearray(b"%PDF-1.4\n"), []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)
