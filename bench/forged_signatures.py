#!/usr/bin/env python3
"""Time a forged request that carries many long candidate signatures.

A refused request is kept for forensics, which looks for each candidate signature in
every header. This sends a Stripe event whose `Stripe-Signature` holds N `v1`
candidates of 500 bytes each (hex), all but the last two characters alike, so that
each candidate nearly matches the header at every offset: the worst case for that
search. The server answers 400 `invalid_signature`; the time to that answer, on an
otherwise idle server, is what one such request costs it.

    cargo run --release -p hookhost -- serve --config fixtures/demo.toml   # another shell
    python3 bench/forged_signatures.py --candidates 100

Loopback only: the URL must name 127.0.0.1 or localhost.
"""

import argparse
import http.client
import json
import statistics
import time
import urllib.parse


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:8080/webhooks/stripe")
    parser.add_argument("--candidates", type=int, default=100)
    parser.add_argument("--requests", type=int, default=5)
    args = parser.parse_args()
    url = urllib.parse.urlsplit(args.url)
    if url.hostname not in ("127.0.0.1", "localhost"):
        parser.error("--url must name 127.0.0.1 or localhost")
    if not 1 <= args.candidates <= 100 or not 1 <= args.requests <= 100:
        parser.error("--candidates and --requests are from 1 to 100")

    now = int(time.time())
    entries = ",".join("v1=" + "aa" * 499 + "%02x" % i for i in range(args.candidates))
    header = f"t={now},{entries}"
    body = json.dumps({"id": "evt_forged", "object": "event", "type": "customer.updated",
                       "created": now, "data": {"object": {"id": "cus_1", "object": "customer"}}})
    took = []
    for _ in range(args.requests):
        connection = http.client.HTTPConnection(url.hostname, url.port or 80, timeout=30)
        started = time.perf_counter()
        connection.request("POST", url.path, body=body, headers={
            "stripe-signature": header, "content-type": "application/json"})
        answer = connection.getresponse()
        text = answer.read().decode()
        took.append((time.perf_counter() - started) * 1000)
        connection.close()
    print(f"{args.candidates} candidates, a {len(header):,}-byte header: {answer.status} {text}")
    print("ms per request: " + " ".join(f"{t:.1f}" for t in took)
          + f" (median {statistics.median(took):.1f})")


if __name__ == "__main__":
    main()
