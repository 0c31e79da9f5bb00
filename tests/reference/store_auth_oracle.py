"""Oracle for tests/core/tst_store_auth.cpp: HMAC-SHA256 and the rendezvous store's scheme
(docs/parallel.md, "The rendezvous store and its secret") computed with Python's hmac and
hashlib, not with the code under test.

stdin:  {"hmac": [[key_hex, message_hex], ...],
         "store": [{"secret": str, "run_id": str, "key": str, "value_hex": str}, ...]}
stdout: {"hmac": [digest_hex, ...], "store": [{"name": str, "sealed_hex": str}, ...]}
"""
import hashlib
import hmac
import json
import sys


def mac(key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, hashlib.sha256).digest()


def field(b: bytes) -> bytes:
    # Length-prefixed: 8 bytes little-endian, then the bytes.
    return len(b).to_bytes(8, "little") + b


def main() -> None:
    req = json.load(sys.stdin)
    out = {"hmac": [], "store": []}
    for key_hex, msg_hex in req.get("hmac", []):
        out["hmac"].append(mac(bytes.fromhex(key_hex), bytes.fromhex(msg_hex)).hex())
    for c in req.get("store", []):
        secret = c["secret"].encode()
        name_key = mac(secret, b"odyssey rendezvous store: key names")
        tag_key = mac(secret, b"odyssey rendezvous store: tags")
        key = c["key"].encode()
        value = bytes.fromhex(c["value_hex"])
        tag = mac(tag_key, field(c["run_id"].encode()) + field(key) + field(value))
        out["store"].append({"name": "odyssey-auth/" + mac(name_key, key).hex(), "sealed_hex": (value + tag).hex()})
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
