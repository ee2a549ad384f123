# The vendored projects' own test suites are task data, run by the environment in its sandbox.
collect_ignore_glob = ["repo_env/data/*"]
