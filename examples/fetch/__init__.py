"""A sandboxed-tool walk-through: a task kind that GETs a URL with the registered
``http_get`` tool on the Hands, and a local service for it to GET (README, "Tools in
sandboxes")."""
