"""Storage engines behind ``session_store.backend.Backend``; imported lazily by the factory."""
