"""External fabrics (one module per kind), registered in ``FABRICS``."""

from moesim.topology.fabrics import leaf_spine, none, rail_optimized, single_switch
from moesim.topology.fabrics.base import FABRICS, Fabric

LeafSpine = leaf_spine.LeafSpine
NoFabric = none.NoFabric
RailOptimized = rail_optimized.RailOptimized
SingleSwitch = single_switch.SingleSwitch

__all__ = ["FABRICS", "Fabric", "LeafSpine", "NoFabric", "RailOptimized", "SingleSwitch"]
