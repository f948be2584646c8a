"""The conformance suite: the same scenarios, against real snowmint servers, for every client
(Rust, Go, Java, Python's Client and AsyncClient, TypeScript), each through its driver
(drivers.py). clients/conformance/test.sh builds the drivers and runs this; scripts/check
runs that.

    python3 run.py [--clients rust,go,...] [--scenarios calls,hung,...]
                   [--rolling-down-seconds 30] [--paced-seconds 60]

The clients run each scenario at once, side by side; the rolling restart shares its two
servers between them. Exit status 1 when any client broke the contract anywhere.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from drivers import CLIENTS, Driver, DriverError, Reply
from scenarios import SCENARIOS, Run, Settings, rolling_restart, rolling_servers, run_rolling

# The scenarios that take their time, run last, in this order.
LONG = ("rolling", "paced")


def run_one(name: str, scenario: Callable[[Run], None], driver: Driver, settings: Settings) -> list[str]:
    run = Run(driver, settings)
    try:
        scenario(run)
    except (AssertionError, DriverError, TimeoutError, RuntimeError, OSError) as error:
        run.failures.append(f"{type(error).__name__}: {error}\n{traceback.format_exc(limit=3)}")
    finally:
        run.close()
    return run.failures


def run_rolling_scenario(drivers: dict[str, Driver], settings: Settings) -> dict[str, list[str]]:
    loop_ms = (1.0 + settings.rolling_down_s + 4.0) * 1000
    runs = {client: Run(driver, settings) for client, driver in drivers.items()}
    checks: dict[str, Callable[[Reply], None]] = {}
    with rolling_servers() as rolling:
        try:
            for client, run in runs.items():
                try:
                    checks[client] = rolling_restart(run, rolling, loop_ms)
                except (AssertionError, DriverError) as error:
                    run.failures.append(str(error))
            run_rolling(rolling, settings.rolling_down_s)
            for client, check in checks.items():
                try:
                    check({})
                except (AssertionError, DriverError, TimeoutError) as error:
                    runs[client].failures.append(f"{type(error).__name__}: {error}")
        finally:
            for run in runs.values():
                run.close()
    return {client: run.failures for client, run in runs.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", default=",".join(CLIENTS))
    parser.add_argument("--scenarios", default=",".join([*SCENARIOS, "rolling"]))
    parser.add_argument("--rolling-down-seconds", type=float, default=Settings.rolling_down_s)
    parser.add_argument("--paced-seconds", type=float, default=Settings.paced_s)
    args = parser.parse_args()
    clients = args.clients.split(",")
    scenarios = args.scenarios.split(",")
    unknown = [c for c in clients if c not in CLIENTS] + [s for s in scenarios if s not in [*SCENARIOS, "rolling"]]
    if unknown:
        parser.error(f"unknown: {', '.join(unknown)}")
    settings = Settings(rolling_down_s=args.rolling_down_seconds, paced_s=args.paced_seconds)

    drivers: dict[str, Driver] = {}
    failures: dict[tuple[str, str], list[str]] = {}
    timings: dict[str, float] = {}
    lock = threading.Lock()

    def run_scenario(scenario: str) -> None:
        start = time.monotonic()
        if scenario == "rolling":
            results = run_rolling_scenario(drivers, settings)
        else:
            with ThreadPoolExecutor(len(drivers)) as pool:
                futures = {
                    client: pool.submit(run_one, scenario, SCENARIOS[scenario], driver, settings)
                    for client, driver in drivers.items()
                }
                results = {client: future.result() for client, future in futures.items()}
        took = time.monotonic() - start
        verdict = ", ".join(f"{c} {'ok' if not results[c] else 'FAILED'}" for c in clients)
        with lock:
            timings[scenario] = took
            for client, found in results.items():
                failures[(scenario, client)] = found
            print(f"== {scenario} ({took:.1f} s): {verdict}", flush=True)

    suite_start = time.monotonic()
    try:
        for client in clients:
            drivers[client] = Driver(client)
        # One after another, the two long ones (the rolling restart, a minute of paced calls)
        # last. Not side by side: on two cores the restarts' load could hold up a paced
        # client's refill past its margin (CI once: one Go call of 601 waited a round trip).
        for scenario in [s for s in scenarios if s not in LONG] + [s for s in LONG if s in scenarios]:
            run_scenario(scenario)
    finally:
        for driver in drivers.values():
            driver.close()

    broken = {key: found for key, found in failures.items() if found}
    for (scenario, client), found in broken.items():
        print(f"\n-- {scenario}, {client}:")
        for failure in found[:8]:
            print(f"   {failure}")
        if len(found) > 8:
            print(f"   ... and {len(found) - 8} more")
    total = time.monotonic() - suite_start
    print(
        f"\nconformance: {len(scenarios)} scenarios x {len(clients)} clients in {total:.0f} s: "
        + ("all kept the contract" if not broken else f"{len(broken)} broke it")
    )
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
