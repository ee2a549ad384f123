# The tasks' own tests (Terminal-Bench's tests/) run inside the sandbox after an episode, in
# the workspace; the repository's test run must not collect them.
collect_ignore_glob = ["*"]
