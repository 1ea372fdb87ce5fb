"""Test infrastructure shared by every test directory (importable as `_support`: pytest puts
`tests/` on `sys.path`). `db`: the database fixtures, made available to all tests by the root
`tests/conftest.py`; `zygote`: the fork server for child processes; `procs`: its client and the
children it forks; `wait`: `wait_for`, polling with timeouts scaled by
`DURABLE_SWARM_TEST_TIMEOUT_SCALE`; `logs`: the files of lines tools write, one per execution."""
