"""Runs in: the exporter process (and `confirm` from an operator's shell, with the exporter's settings).

StoreGuard: a Redis that comes back empty is a lost store, not a user deleting everything.

The reconciler declares the whole of Serve from the deployments in Redis, so a Redis that
returns without its data (a failover to an empty replica, a lost volume) would make it delete
every served model within a pass. Before each pass the guard tells a lost store from a user's
intent:

- the installation marker (keys.installation) this process saw is gone, or another one;
- no marker, while Ray Serve runs models of an installation whose exporter has ended (the GCS
  record of serving/control/ownership.py names them): the exporter restarted with its store lost;
- no deployment recorded at all while Serve runs models this installation applied (a user's
  delete leaves its record in DELETING until Serve has removed the model, so an empty
  registry never follows from deletes while models still run).

While the store looks lost, nothing is applied or deleted (Serve keeps serving what it
serves), the exporter reports NOT_SERVING, deployment changes are refused, and the reason is
logged once as an ERROR and kept in the store (keys.store_lost: an exporter restarted
meanwhile sees it). It ends when the store is restored (its marker back, the record gone with
the restore) or when an operator confirms the store's state as meant:

    python -m paddleray.services.exporter.store.store_guard confirm    # with the exporter's PADDLERAY_EXPORTER_* env

after which the next pass applies what the store holds (deleting the models it does not name).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import uuid
from collections.abc import Awaitable, Callable

from paddleray.services.common import errors
from paddleray.services.exporter.store.deployment_store import DeploymentRecord, DeploymentStore

log = logging.getLogger(__name__)

OPERATOR_HINT = ("restore the exporter's Redis (its data, with the key paddleray:exp:installation), or, if its "
                 "state is meant, confirm it: python -m paddleray.services.exporter.store.store_guard confirm "
                 "(docs/reliability.md)")
# The GCS record of who manages Serve (serving/control/ownership.py owner()), or None; blocking, so awaited in a thread.
OwnerRecord = Callable[[], Awaitable[dict | None]]


class StoreGuard:
    def __init__(self, store: DeploymentStore, owner: OwnerRecord) -> None:
        self.store = store
        self.owner = owner
        self.seen: str | None = None  # the installation marker this process served under
        self.lost = ""  # why the store looks lost ("" while it does not)

    async def check(self, records: list[DeploymentRecord], served: list[str] | None = None) -> bool:
        """True when this pass may apply what the store holds; False (and `lost` says why)
        while the store looks lost. Makes the marker of a new installation. served: what this
        process last recorded as served (None: unknown); [] spares asking the GCS."""
        marker = await self.store.installation_marker()
        recorded = await self.store.store_lost()
        if recorded is not None:
            reason, installation = recorded.get("reason", ""), recorded.get("installation", "")
        elif self.seen is not None and marker != self.seen:
            reason = ("the exporter's Redis lost its installation marker (it came back without its data)" if marker is None
                      else f"the exporter's Redis names another installation ({marker}) than the one served ({self.seen})")
            installation = self.seen
        elif (marker is None or (not records and served != [])) and not await self.store.loss_confirmed():
            reason, installation = await self._serve_outlived_the_store(marker)
        else:
            reason, installation = "", ""
        if reason:
            if recorded is None:
                await self.store.record_store_lost(installation, reason)
            if reason != self.lost:
                log.error("serving frozen: %s; nothing is applied or deleted until then: %s", reason, OPERATOR_HINT)
            self.lost = reason
            return False
        if self.lost:
            log.warning("the exporter's store is back (restored or confirmed): applying its deployments again")
        self.lost = ""
        self.seen = marker or await self.store.installation_id()
        return True

    async def _serve_outlived_the_store(self, marker: str | None) -> tuple[str, str]:
        """(why the store looks lost, the installation Serve runs) when Serve runs models the
        store does not know of; ("", "") otherwise. Asks the GCS (only in these rare cases)."""
        owner = await self.owner()
        served = list((owner or {}).get("served") or [])
        if owner is None or not served or not owner.get("installation"):
            return "", ""
        listed = ", ".join(served[:5]) + (", ..." if len(served) > 5 else "")
        if marker is None and not owner.get("alive"):
            # A live owner is another installation's exporter (ownership.claim refuses it) or this
            # very driver's (an earlier exporter of the process): neither is a lost store.
            return (f"the exporter's Redis has no installation marker while Ray Serve runs {len(served)} models of "
                    f"installation {owner['installation']} ({listed})", owner["installation"])
        if marker is not None and owner["installation"] == marker:
            return (f"the exporter's Redis records no deployment while Ray Serve runs {len(served)} models this "
                    f"installation deployed ({listed})", marker)
        return "", ""

    async def applied(self) -> None:
        """After an apply of what the store holds: an operator's confirmation is used up."""
        if await self.store.loss_confirmed():
            await self.store.consume_loss_confirmation()

    async def refuse_changes(self) -> None:
        """FAILED_PRECONDITION for deployment changes while the store looks lost: they would be
        written to a store an operator is about to replace."""
        recorded = await self.store.store_lost()
        if recorded is not None:
            raise errors.FailedPrecondition(
                f"deployment changes are refused while the exporter's store looks lost "
                f"({recorded.get('reason', '')}): {OPERATOR_HINT}")


async def confirm(store: DeploymentStore) -> str:
    """The operator's confirmation; returns what was confirmed, for the console."""
    recorded = await store.store_lost()
    if recorded is None:
        return "the store is not marked lost: nothing to confirm"
    installation = recorded.get("installation") or await store.installation_marker() or uuid.uuid4().hex
    await store.confirm_store_loss(installation)
    return (f"confirmed: the exporter applies this store's deployments as installation {installation} on its next "
            f"pass (models it does not record are deleted from Serve); it was marked lost because "
            f"{recorded.get('reason', '')}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m paddleray.services.exporter.store.store_guard",
                                     description="An exporter store marked lost: confirm its state as meant.")
    parser.add_argument("action", choices=["confirm", "status"])
    args = parser.parse_args(argv)

    async def run() -> str:
        from paddleray.services.common import redis_client
        from paddleray.services.exporter.settings import ExporterSettings

        settings = ExporterSettings()
        client = redis_client.connect(settings, max_connections=2)
        try:
            store = DeploymentStore(client)
            if args.action == "confirm":
                return await confirm(store)
            recorded = await store.store_lost()
            return f"lost: {recorded.get('reason', '')}" if recorded else "not marked lost"
        finally:
            await client.aclose()

    print(asyncio.run(run()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
