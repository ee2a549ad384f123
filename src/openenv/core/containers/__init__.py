"""OpenEnv's import path for providers; the implementations live in `openenv.providers`."""
