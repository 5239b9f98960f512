"""What the HTTP APIs share: the error shape and bearer-token authentication."""
