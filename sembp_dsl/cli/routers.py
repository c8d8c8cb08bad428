"""What makes a router file unusable, asked alike by `sbpc check` and the language server."""

from __future__ import annotations


def router_problem(path: str, groups: tuple[str, ...]) -> str | None:
    """The problem with the router file at `path` for the model `groups` named through it, or None when it is
    usable."""
    # models.routing costs about 0.8 s to import: only a pipeline that names a router file pays it
    from ..models import routing

    return routing.router_problem(path, groups)
