"""The five-emails example: an idempotent email service standing in for a provider such as
SendGrid, its HTTP client, and the durable task that sends a batch through it."""
