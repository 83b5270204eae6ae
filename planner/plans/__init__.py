"""Plan search: the request, the vectorised search over layouts, its result, guidance and sweeps."""
