"""The model's identity: the build fingerprint rkdet convert embeds in a .rknn, else its sha256.

Why here: rkdet-run refuses (exit 5) a model that is not the build deploy pushed, reading the
fingerprint from the file's bytes (RKNNLite 2.x has no query for the custom string). The container
header reader (`read_container`) is shared with the host's full parser, rkdet/convert/rknn_file.py.
"""

import collections
import os
import re
import struct
from typing import Any, Dict, Optional

from .bounded import loads_bounded, open_regular
from .exits import EXIT_MODEL_REFUSED, RunnerError
from .hashing import file_sha256

EMBED_KEY = "rkdet-fp="  # rkdet convert's custom string: "[user text;]rkdet-fp=<64 hex>" (docs/FORMATS.md)
HEX64 = re.compile(r"^[0-9a-f]{64}$")
RKNN_MAGIC = b"RKNN\0\0\0\0"
ENCRYPTED_MAGIC = b"CYPTRKNN"
HEADER_SIZE = 64  # 8 magic + 8 format version + 8 model size + 40 reserved (format >= 2)
_RKNN_CUSTOM_SLOT = 11  # root-table slot of config(custom_string=...) in toolkit2 2.x files

MAX_RKNN_STRING = 1 << 20  # bytes of the custom string rkdet reads from a .rknn (rkdet's is < 200)
MAX_RKNN_METADATA = 1 << 20  # bytes of the .rknn's trailing metadata JSON


Container = collections.namedtuple("Container", "format_version model_size model_at json_at")


class ContainerError(ValueError):
    """Not a toolkit2 .rknn container: the message says what the header shows."""


def read_container(data):
    # type: (Any) -> Container
    """The toolkit2 container header of `data` (bytes or a memoryview of the mapped file): format
    version, model size, where the model payload and the metadata JSON's size field start. Raises
    ContainerError (encrypted, no magic, toolkit1 format, truncated); nothing is copied."""
    if bytes(data[:8]) == ENCRYPTED_MAGIC:
        raise ContainerError("encrypted RKNN (CYPTRKNN) is not supported; export without encryption")
    if len(data) < 24 or bytes(data[:8]) != RKNN_MAGIC:
        raise ContainerError("not an .rknn file (no 'RKNN' magic); give a file written by rknn-toolkit2 export_rknn")
    version, model_size = struct.unpack_from("<QQ", data, 8)
    if (version & 0xFFF) < 2:
        raise ContainerError("container format %d (rknn-toolkit 1.x) is not supported; rebuild with toolkit2" % version)
    if len(data) < HEADER_SIZE + model_size + 8:
        raise ContainerError("truncated: header promises a %d-byte model but the file has %d bytes"
                             % (model_size, len(data)))
    return Container(int(version), int(model_size), HEADER_SIZE, HEADER_SIZE + int(model_size))


def _fb_string(buf, table, slot):
    # type: (Any, int, int) -> Optional[str]
    """The string in `slot` of the FlatBuffer table at `table`, or None (absent, malformed or longer
    than MAX_RKNN_STRING). `buf` is bytes or a memoryview of a mapped file: nothing is copied but the string."""
    try:
        vtable = table - struct.unpack_from("<i", buf, table)[0]
        vt_size = struct.unpack_from("<H", buf, vtable)[0]
        if 4 + 2 * slot + 2 > vt_size:
            return None
        field_off = struct.unpack_from("<H", buf, vtable + 4 + 2 * slot)[0]
        if not field_off:
            return None
        pos = table + field_off
        target = pos + struct.unpack_from("<I", buf, pos)[0]
        length = struct.unpack_from("<I", buf, target)[0]
        if length > MAX_RKNN_STRING or target + 4 + length > len(buf):
            return None
        return bytes(buf[target + 4:target + 4 + length]).decode("utf-8", "replace")
    except (struct.error, IndexError, ValueError):
        return None


def read_rknn_facts(path):
    # type: (str) -> Optional[Dict[str, Any]]
    """What a toolkit2 `.rknn` says about itself, read from its bytes (RKNNLite 2.x has no query for
    the custom string): custom_string, embedded_fingerprint (the last `rkdet-fp=<64 hex>` in it, or
    None), toolkit_version (metadata JSON) and format_version. None when the file is no readable
    toolkit2 .rknn (toolkit1, encrypted, truncated): then only its sha256 can identify it.

    Bounded: the file is mapped, not read (a 2 GiB model costs no memory), the strings and the
    metadata JSON are capped in size and depth, and a FIFO or device is never opened blocking."""
    import mmap
    try:
        fd = open_regular(path)
    except (OSError, IOError):
        return None
    try:
        if os.fstat(fd).st_size < 72:
            return None
        mapped = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    except (OSError, IOError, ValueError):
        return None
    finally:
        os.close(fd)
    data = memoryview(mapped)
    try:
        return _rknn_facts(data)
    finally:
        data.release()
        try:
            mapped.close()
        except BufferError:  # a slice still referenced: unmapped when it is collected
            pass


def _rknn_facts(data):
    # type: (memoryview) -> Optional[Dict[str, Any]]
    if len(data) < 72:
        return None
    try:
        version, model_size, model_at, json_at = read_container(data)
    except ContainerError:
        return None
    payload = data[model_at:model_at + model_size]
    try:
        if len(payload) < 8 or bytes(payload[4:8]) != b"RKNN":
            return None
        custom = _fb_string(payload, struct.unpack_from("<I", payload, 0)[0], _RKNN_CUSTOM_SLOT) or ""
    finally:
        payload.release()
    toolkit = None
    json_size = struct.unpack_from("<Q", data, json_at)[0]
    if json_size <= MAX_RKNN_METADATA:
        try:
            meta = loads_bounded(bytes(data[json_at + 8:json_at + 8 + json_size]), "metadata")
            toolkit = str(meta.get("version"))[:64] if isinstance(meta, dict) and meta.get("version") else None
        except ValueError:
            pass
    at = custom.rfind(EMBED_KEY)
    embedded = custom[at + len(EMBED_KEY):at + len(EMBED_KEY) + 64] if at >= 0 else None
    return {"custom_string": custom[:1024], "format_version": int(version),
            "embedded_fingerprint": embedded if embedded and HEX64.match(embedded) else None,
            "toolkit_version": toolkit}


def check_model(model, expect_fingerprint=None, expect_sha256=None):
    # type: (str, Optional[str], Optional[str]) -> Dict[str, Any]
    """Is this the model deploy pushed? By the embedded build fingerprint when the model carries one
    and one is expected, else by its sha256; raises RunnerError (exit 5) naming both values when not.
    Returns run.json's "model_check": {"by": "embedded-fingerprint" | "sha256" | "none", ...}."""
    facts = read_rknn_facts(model) if model.endswith(".rknn") else None
    found = facts and facts["embedded_fingerprint"]
    if expect_fingerprint and found:
        if found != expect_fingerprint:
            raise RunnerError("%s: refused: it carries build fingerprint %s, expected %s: not the build deploy "
                              "pushed; deploy it again (rkdet deploy pushes the model with its fingerprint)"
                              % (model, found[:16], expect_fingerprint[:16]), EXIT_MODEL_REFUSED)
        return {"by": "embedded-fingerprint", "expected": expect_fingerprint, "found": found}
    why = ("no --expect-fingerprint" if not expect_fingerprint else
           "the model carries no rkdet build fingerprint" if facts is not None else
           "not a toolkit2 .rknn: no embedded fingerprint to read")
    if expect_sha256:
        actual = file_sha256(model)
        if actual != expect_sha256:
            raise RunnerError("%s: refused: sha256 %s, expected %s (%s): not the file deploy pushed; deploy it again"
                              % (model, actual[:16], expect_sha256[:16], why), EXIT_MODEL_REFUSED)
        return {"by": "sha256", "expected": expect_sha256, "found": actual, "why": why}
    return {"by": "none", "why": "nothing expected (no --expect-fingerprint or --expect-sha256)"}
