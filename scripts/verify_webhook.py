"""Checks a vaebox webhook delivery as a receiver would: python3 verify_webhook.py SECRET SIGNATURE BODY_FILE.

SIGNATURE is the Vaebox-Signature header's value; prints `ok` and exits 0 when it is the box's HMAC of
the body and at most 5 minutes old, else says why and exits 1. The function is the one README shows.
"""
import hashlib
import hmac
import sys
import time


def verify(secret: str, signature: str, body: bytes, tolerance_s: int = 300) -> bool:
    fields = dict(part.split("=", 1) for part in signature.split(","))
    t, sent = fields["t"], fields["v1"]
    expected = hmac.new(secret.encode(), t.encode() + b"." + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, sent) and abs(time.time() - int(t)) <= tolerance_s


if __name__ == "__main__":
    secret, signature, body_file = sys.argv[1:4]
    with open(body_file, "rb") as f:
        body = f.read()
    if not verify(secret, signature, body):
        sys.exit(f"not signed by the box (or older than 5 minutes): {signature}")
    print("ok")
