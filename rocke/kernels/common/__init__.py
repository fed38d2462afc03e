"""Pieces every kernel family shares; `checks` validates specs and launch inputs."""
