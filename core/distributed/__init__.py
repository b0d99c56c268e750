"""Scale-out: one `solve` run searched by several engine replicas, each a Ray actor.

docs/design.md, "Scale-out": the `solve` process (the driver) reads the input, hands problems to
replicas as they have room and is the only writer of the output folder; each replica
(:mod:`.replica`) loads the generator and the PRM once and runs its own
:class:`~core.search.driver.SearchDriver` on one device (a GPU, or its share of the CPU cores).
Sampling is seeded by run seed, problem id and tree path, so a problem's record does not depend
on which replica searched it or on how many there are.

Ray is an optional extra (``pip install 'specscale[ray]'``): nothing here imports it at module
import, and a run with one worker never does.
"""

from __future__ import annotations

import importlib.util

RAY_INSTALL_HINT = "pip install 'specscale[ray]'"


def ray_missing() -> bool:
    """True when Ray cannot be imported here (checked without importing it, so it costs no time)."""
    try:
        return importlib.util.find_spec("ray") is None
    except (ImportError, ValueError):  # a broken or blocked install (sys.modules['ray'] = None)
        return True


class ReplicasLost(RuntimeError):
    """Every replica of the run died (its process killed, its node lost) with problems left."""


class ReplicaFailed(RuntimeError):
    """A replica's search raised an exception (a bug, never bad input); the message holds its traceback."""
