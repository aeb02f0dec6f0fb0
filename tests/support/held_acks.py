"""Broker acks held back from a replicator: its Delivery sees no delivery report while
`hold` is set (the broker did store the messages; the replicator just does not know yet),
and gets every held one, in order, once it is cleared."""

from __future__ import annotations

import threading

from zonesync.capture import replicator as replicator_mod
from zonesync.capture.delivery import Delivery


class AckGate:
    def __init__(self):
        self.hold = threading.Event()
        self.held_total = 0  # delivery reports held back so far, over every Delivery

    def install(self, monkeypatch) -> AckGate:
        """Every replicator pass started from now on produces through a gated Delivery."""
        gate = self

        class GatedDelivery(Delivery):
            def __init__(self, *args, **kwargs):
                self._held: list = []
                super().__init__(*args, **kwargs)

            def _on_delivery(self, err, msg) -> None:
                if gate.hold.is_set():
                    self._held.append((err, msg))
                    gate.held_total += 1
                    return
                self._release()
                super()._on_delivery(err, msg)

            def _release(self) -> None:
                held, self._held = self._held, []
                for err, msg in held:
                    super()._on_delivery(err, msg)

            def acked_checkpoint(self):
                if not gate.hold.is_set():
                    self._release()
                return super().acked_checkpoint()

        monkeypatch.setattr(replicator_mod, "Delivery", GatedDelivery)
        return self
