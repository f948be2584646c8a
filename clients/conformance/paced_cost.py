"""What a lightly used buffered client costs the server: each client, through its conformance
driver, takes IDs at a steady rate from a buffered client with the default settings, against a
server of its own, and the server's counter says how many IDs it minted meanwhile. Run by
scripts/measure/bench-clients.sh; not a test.

    python3 paced_cost.py [--rate 10] [--seconds 20] [--clients rust,go,...]
"""

from __future__ import annotations

import argparse
from concurrent.futures import ThreadPoolExecutor

from drivers import CLIENTS, Driver
from servers import Server


def measure(client: str, rate: float, seconds: float) -> str:
    server = Server(90)
    driver = Driver(client)
    try:
        reply = driver.call("client", name="c", endpoints=[server.grpc_addr], buffer={})
        assert reply["ok"], reply
        reply = driver.call("loop", client="c", every_ms=1000 / rate, duration_ms=seconds * 1000, timeout=seconds + 60)
        assert reply["ok"], reply
        calls = reply["calls"]
        used = sum(1 for c in calls if c[3] is None)
        minted = server.issued()
        slowest = max(c[1] for c in calls[10:]) if len(calls) > 10 else float("nan")
        return (
            f"{client}: {used} IDs used, {minted} minted in {seconds:g} s: {minted / seconds:.1f} IDs/s minted "
            f"for {used / seconds:.1f} used ({minted / max(used, 1):.2f} per ID used); "
            f"slowest call after the first 10: {slowest:.2f} ms"
        )
    finally:
        driver.close()
        server.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=10.0, help="IDs per second")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--clients", default=",".join(CLIENTS))
    args = parser.parse_args()
    clients = args.clients.split(",")
    with ThreadPoolExecutor(len(clients)) as pool:
        for line in pool.map(lambda c: measure(c, args.rate, args.seconds), clients):
            print(line, flush=True)


if __name__ == "__main__":
    main()
