"""Mints IDs from the snowmint servers in $SNOWMINT_ENDPOINTS (comma-separated host:port)
and decodes one."""

import json
import os

from snowmint_client import BufferConfig, Client, UnavailableError, decode


def main() -> None:
    endpoints = os.environ["SNOWMINT_ENDPOINTS"].split(",")
    with Client(endpoints, buffer=BufferConfig()) as client:
        try:
            id = client.next_id()
            ids = client.batch(3, timeout=0.5)  # a deadline for this call, failover included
        except UnavailableError as error:  # every server refused: retry later
            raise SystemExit(f"no IDs for now: {error}") from error
    d = decode(id)
    print(f"id {id}: minted {d.rfc3339} by worker {d.worker_id}, sequence {d.sequence}")
    print("batch:", ids)
    # In JSON an ID is a string: JavaScript's numbers lose precision past 2**53.
    print(json.dumps({"id": str(id)}))


if __name__ == "__main__":
    main()
