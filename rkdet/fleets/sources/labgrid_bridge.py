"""Reserve, acquire, keep and release labgrid places: run by rkdet in labgrid's own Python.

Why a separate process: labgrid's gRPC client needs protobuf>=5.27 while rknn-toolkit2 (in rkdet's
venv) needs protobuf<=4.25.4, so labgrid lives in its own venv and rkdet starts this script there
(rkdet/fleets/sources/labgrid_places.py). It imports only the standard library and labgrid, never rkdet.

Protocol: one JSON object per stdout line, each with an "event":
  {"event": "wait", "place", "holder"}        a matching place is busy; we wait (up to --timeout)
  {"event": "acquired", "places": [...]}      every matching place is ours: name, tags, network_services
  {"event": "alive", "time"}                  a refresh went through (every --refresh seconds)
  {"event": "error", "code", "message"}       one line; code 3 (lab/connection) or 2 (usage)
  {"event": "released", "places": [...]}      released and reservations cancelled; then exit
Closing stdin (rkdet exiting, however it exits: the pipe closes even on SIGKILL), SIGTERM, SIGINT
or SIGHUP releases every acquired place and cancels every reservation before the script exits.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
import threading
import time

import grpc
from labgrid.remote.client import ClientSession, Error
from labgrid.remote.common import ReservationState
from labgrid.remote.generated import labgrid_coordinator_pb2 as pb
from labgrid.util.proxy import proxymanager

POLL_SECONDS = 0.5


def emit(event: str, **fields: object) -> None:
    sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")
    sys.stdout.flush()


class Failed(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class Bridge:
    def __init__(self, address: str, tags: dict[str, str], timeout: float, refresh: float) -> None:
        self.address = address
        self.tags = tags
        self.timeout = timeout
        self.deadline = time.monotonic() + timeout  # one budget for connecting and waiting for places
        self.refresh = refresh
        self.stop = asyncio.Event()
        self.session: ClientSession | None = None
        self.tokens: list[str] = []
        self.acquired: list[str] = []

    # -- helpers --

    def matching(self) -> list[str]:
        assert self.session is not None
        return sorted(name for name, place in self.session.places.items()
                      if all(place.tags.get(k) == v for k, v in self.tags.items()))

    async def rpc(self, what: str, call, request):  # type: ignore[no-untyped-def]
        try:
            return await asyncio.wait_for(call(request), timeout=30)
        except grpc.aio.AioRpcError as err:
            raise Failed(3, f"labgrid coordinator {self.address}: {what} failed ({err.details()})") from None
        except asyncio.TimeoutError:
            raise Failed(3, f"labgrid coordinator {self.address}: {what} got no answer in 30 s") from None

    async def holders(self) -> dict[str, str]:
        """Who holds each busy matching place: its acquirer, else the owner of the reservation on it."""
        assert self.session is not None
        owners: dict[str, str] = {}
        try:
            reply = await asyncio.wait_for(self.session.stub.GetReservations(pb.GetReservationsRequest()), 10)
            owners = {r.token: r.owner for r in reply.reservations}
        except (grpc.aio.AioRpcError, asyncio.TimeoutError):
            pass
        out = {}
        for name in self.matching():
            place = self.session.places[name]
            if place.acquired:
                mine = place.acquired == f"{self.session.gethostname()}/{self.session.getuser()}"
                out[name] = f"acquired by {place.acquired}" + (
                    f" (you: an earlier run or session? `labgrid-client -p {name} release` if it is stale)"
                    if mine else "")
            elif place.reservation and place.reservation not in self.tokens:
                out[name] = f"reserved by {owners.get(place.reservation, 'another client')}"
        return out

    async def sleep_or_stop(self, seconds: float) -> None:
        try:
            await asyncio.wait_for(self.stop.wait(), seconds)
        except asyncio.TimeoutError:
            pass

    # -- the steps --

    async def connect(self) -> None:
        loop = asyncio.get_running_loop()
        self.session = ClientSession(address=proxymanager.get_grpc_address(self.address, default_port=20408),
                                     loop=loop)
        budget = max(self.deadline - time.monotonic(), 1.0)
        try:
            await asyncio.wait_for(self.session.start(), timeout=budget)
        except (Error, asyncio.TimeoutError):
            raise Failed(3, f"labgrid coordinator {self.address} is not reachable (no answer within "
                            f"{max(self.timeout, 1.0):g} s); check --labgrid HOST:PORT and that "
                            "labgrid-coordinator runs there") from None

    async def reserve(self) -> list[str]:
        assert self.session is not None
        wanted = self.matching()
        if not wanted:
            tags = ",".join(f"{k}={v}" for k, v in sorted(self.tags.items()))
            raise Failed(3, f"labgrid coordinator {self.address} has no place with tags {tags} "
                            f"(places: {', '.join(sorted(self.session.places)) or 'none'})")
        for _ in wanted:  # one reservation per place: labgrid's scheduler gives each one matching place
            reply = await self.rpc("reservation", self.session.stub.CreateReservation, pb.CreateReservationRequest(
                filters={"main": pb.Reservation.Filter(filter=self.tags)}, prio=0))
            self.tokens.append(reply.reservation.token)
        deadline = self.deadline
        said: dict[str, str] = {}
        while True:
            places: list[str] = []
            waiting = 0
            for token in self.tokens:  # polling also refreshes each reservation's timeout
                reply = await self.rpc("poll", self.session.stub.PollReservation, pb.PollReservationRequest(token=token))
                state = ReservationState(reply.reservation.state)
                if state is ReservationState.allocated:
                    places.append(reply.reservation.allocations["main"])
                elif state is ReservationState.waiting:
                    waiting += 1
                else:
                    raise Failed(3, f"labgrid coordinator {self.address}: our reservation {token} became "
                                    f"{state.name}")
            if not waiting:
                return sorted(places)
            busy = await self.holders()
            for name, holder in busy.items():
                if said.get(name) != holder:
                    emit("wait", place=name, holder=holder)
                    said[name] = holder
            if time.monotonic() >= deadline:
                name, holder = next(iter(sorted(busy.items())), ("(a matching place)", "busy"))
                raise Failed(3, f"labgrid place {name} is {holder}; waited {self.timeout:g} s "
                                "(--reserve-timeout); try later or ask its holder to release it")
            await self.sleep_or_stop(POLL_SECONDS)
            if self.stop.is_set():
                raise Failed(130, "interrupted while waiting for labgrid places")

    async def acquire(self, names: list[str]) -> list[dict]:
        assert self.session is not None
        for name in names:
            await self.rpc(f"acquire of place {name}", self.session.stub.AcquirePlace,
                           pb.AcquirePlaceRequest(placename=name))
            self.acquired.append(name)
        await self.session.sync_with_coordinator()
        out = []
        for name in names:
            place = self.session.places[name]
            try:
                resources = self.session.get_target_resources(place)
            except Error as err:
                raise Failed(3, f"labgrid place {name}: {err}") from None
            services = [{"name": rname, "address": entry.params.get("address"),
                         "username": entry.params.get("username"), "port": entry.params.get("port", 22)}
                        for (rname, cls), entry in sorted(resources.items()) if cls == "NetworkService"]
            out.append({"name": name, "tags": dict(place.tags), "network_services": services})
        return out

    async def hold(self) -> None:
        assert self.session is not None
        while not self.stop.is_set():
            await self.sleep_or_stop(self.refresh)
            if self.stop.is_set():
                return
            for token in self.tokens:
                await self.rpc("refresh", self.session.stub.PollReservation, pb.PollReservationRequest(token=token))
            if self.session.stopping.is_set():
                raise Failed(3, f"labgrid coordinator {self.address} went away while we held our places")
            for name in self.acquired:
                place = self.session.places.get(name)
                if place is None or not place.acquired:
                    raise Failed(3, f"labgrid place {name} was {'deleted' if place is None else 'released'} "
                                    "by someone else while we held it")
            emit("alive", time=time.time())

    async def release(self) -> list[str]:
        """Release what we acquired and cancel what we reserved; every step tried, errors kept short."""
        if self.session is None:
            return []
        released = []
        for name in self.acquired:
            try:
                await asyncio.wait_for(self.session.stub.ReleasePlace(pb.ReleasePlaceRequest(placename=name)), 15)
                released.append(name)
            except (grpc.aio.AioRpcError, asyncio.TimeoutError) as err:
                logging.error("release of %s failed: %s", name, err.details() if isinstance(err, grpc.aio.AioRpcError) else err)
        for token in self.tokens:
            try:
                await asyncio.wait_for(self.session.stub.CancelReservation(pb.CancelReservationRequest(token=token)), 15)
            except (grpc.aio.AioRpcError, asyncio.TimeoutError):
                pass  # expired or already gone: nothing left to cancel
        return released

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.add_signal_handler(sig, self.stop.set)
        threading.Thread(target=_watch_stdin, args=(loop, self.stop), daemon=True).start()
        code = 0
        try:
            await self.connect()
            places = await self.reserve()
            emit("acquired", places=await self.acquire(places))
            await self.hold()
        except Failed as err:
            emit("error", code=err.code, message=str(err))
            code = err.code
        except Exception as err:  # a labgrid API change or a bug: one line for rkdet, details on stderr
            logging.exception("unexpected error")
            emit("error", code=3, message=f"labgrid bridge failed: {type(err).__name__}: {err}")
            code = 3
        finally:
            released = await self.release()
            emit("released", places=released)
            if self.session is not None:
                if not self.session.stopping.is_set():
                    await self.session.stop()
                await self.session.close()
        return code


def _watch_stdin(loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> None:
    """EOF or a "release" line on stdin ends the hold (rkdet closes the pipe on every exit path)."""
    for line in sys.stdin:
        if line.strip() == "release":
            break
    loop.call_soon_threadsafe(stop.set)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", required=True)
    parser.add_argument("--tag", action="append", default=[], help="KEY=VALUE (checked by rkdet)")
    parser.add_argument("--timeout", type=float, required=True)
    parser.add_argument("--refresh", type=float, default=20.0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="labgrid bridge: %(message)s")
    tags = dict(t.split("=", 1) for t in args.tag)
    return asyncio.run(Bridge(args.address, tags, args.timeout, args.refresh).run())


if __name__ == "__main__":
    sys.exit(main())
