"""Wire-compatibility tests against the published OpenEnv package (`openenv==0.10.0`)."""
