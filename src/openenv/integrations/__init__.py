"""Trainer integrations. Importing this package is cheap: each integration imports its
trainer (torch, transformers, TRL, ...) only when it is used."""
