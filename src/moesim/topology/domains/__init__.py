"""GPU interconnect domains (one module per kind), registered in ``GPU_DOMAINS``."""

from moesim.topology.domains import mesh, nvswitch
from moesim.topology.domains.base import GPU_DOMAINS, GpuDomain

MeshDomain = mesh.MeshDomain
NvSwitchDomain = nvswitch.NvSwitchDomain

__all__ = ["GPU_DOMAINS", "GpuDomain", "MeshDomain", "NvSwitchDomain"]
