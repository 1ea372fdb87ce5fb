"""The `durable-swarm` command's parts (the entry point is `durable_swarm.cli`)."""
