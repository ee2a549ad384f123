"""Adapters that let RL trainers (TRL, verl, SkyRL, torchforge) drive environments served by
openenv. Each module imports its trainer only when used, so `import openenv` stays light."""
