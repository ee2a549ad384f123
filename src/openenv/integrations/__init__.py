"""Adapters that let RL trainers (TRL, verl, SkyRL, torchforge) drive environments served by
openenv. Importing this package is cheap: each integration imports its trainer (torch,
transformers, TRL, ...) only when it is used."""
