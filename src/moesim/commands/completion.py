"""Shell completion of option values (``moesim --install-completion``): the names the registries and the
catalogs hold, so a user can tab through models, backends, network modes, topologies and ``--set`` keys."""

from __future__ import annotations


def _starting(names: list[str], incomplete: str) -> list[str]:
    return [n for n in names if n.startswith(incomplete)]


def models(incomplete: str) -> list[str]:
    from moesim.models.catalog import model_keys

    return _starting(model_keys(), incomplete)


def backends(incomplete: str) -> list[str]:
    from moesim.network import BACKENDS

    return _starting(BACKENDS.names(), incomplete)


def networks(incomplete: str) -> list[str]:
    from moesim.network.params import NETWORK_MODES

    return _starting(list(NETWORK_MODES), incomplete)


def topologies(incomplete: str) -> list[str]:
    from moesim.topology import SERVER_TEMPLATES, TOPOLOGIES

    return _starting([*TOPOLOGIES.names(), *(f"{n}:" for n in SERVER_TEMPLATES.names())], incomplete)


def set_keys(incomplete: str) -> list[str]:
    """``--set`` completes the parameter names, each followed by ``=``."""
    from moesim.system.run import OVERRIDES

    return _starting([f"{k}=" for k in sorted(OVERRIDES)], incomplete)
