"""Entry point of wbcore-ray: the ``ray`` fabric engine and the ``node`` isolation tier."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from wbcore_runtime import hookimpl
from wbcore_runtime.contract.drivers import Availability
from wbcore_runtime.contract.records import FabricEngine, IsolationTier


def _engine(runtime: Any) -> Any:
    from wbcore_ray.engine import RayEngine

    return RayEngine(runtime)


def _installed() -> Availability:
    from wbcore_ray.cluster import installed

    return installed()


def _tier(runtime: Any) -> Any:
    from wbcore_ray.tier import NodeTier

    return NodeTier(runtime)


def _tier_available() -> Availability:
    from wbcore_ray.cluster import node_tier_available

    return node_tier_available()


@hookimpl
def wbcore_fabric_engines() -> Iterator[FabricEngine]:
    yield FabricEngine(name="ray",
                       summary="Ray actors across a cluster's nodes (WB_RAY_ADDRESS; else a local Ray), "
                       "one compile per node, modules through the object store", factory=_engine,
                       available=_installed)


@hookimpl
def wbcore_isolation_tiers() -> Iterator[IsolationTier]:
    yield IsolationTier(
        name="node",
        summary="one call on another node of a Ray cluster (WB_RAY_ADDRESS), at instance there: the machine "
        "is the boundary; caps are not bridged",
        rung=3,
        factory=_tier,
        available=_tier_available,
        kinds=frozenset({"command", "kernel"}),
        bridges_caps=False,
        # the node runs the lane's runner on the artifact it received (wbcore_ray.actor)
        hosts_lane_runners=True,
    )
